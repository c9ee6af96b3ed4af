//! The upstream client: a prepared request in, the provider's response head
//! and body out. hyper's connection API over rustls (webpki roots plus an
//! optional extra CA) with our own pools: HTTP/1.1 connections (`conn`) are
//! driven by the response body that reads them; HTTP/2 connections
//! (`h2pool`) are shared by stream capacity, as many as the traffic needs
//! up to a cap. Connect and head timeouts, opt-in connect retries, one
//! retry of a stream the server refused unprocessed, errors classified by
//! the side that failed.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection as _, HttpConnector};
use tower::{Service, ServiceExt};

use crate::config::proxy::RouteProxy;
use crate::config::{Http2Mode, UpstreamConfig};
use crate::error::{BoxError, ProxyError, Side, error_response};
use crate::sniff::Replay;

mod conn;
pub mod egress;
mod h2pool;
pub mod sigv4;
mod tap;
pub mod tls;

/// An upstream connection's transport (TCP, or TLS over TCP).
pub use conn::Io as UpstreamIo;
pub use conn::Shard;
pub use egress::Egress;
pub use tls::{ClientTls, SettingFile, TlsFileError};

/// A response head `Client::send` got, and how long the request waited
/// for an upstream connection or HTTP/2 stream slot before it could be
/// sent (opening a connection included).
#[derive(Debug)]
pub struct Sent {
    /// The response, its body still to come.
    pub response: Response<ResponseBody>,
    /// Time from `send` until the request went on a connection.
    pub pool_wait: Duration,
}

/// The caller's "sent" flag (`Meter::sent_flag`), set once the request is
/// handed to an open upstream connection, which writes its head: from
/// then on the provider may have received it (and may bill it). Cleared
/// again when a connection gives the request back unsent. Borrowed for the
/// exchange, so no request extension (a map allocated per request) and no
/// shared allocation carries it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SentMark<'a>(pub Option<&'a AtomicBool>);

impl SentMark<'_> {
    fn set(self, sent: bool) {
        if let Some(flag) = self.0 {
            flag.store(sent, Ordering::Release);
        }
    }
}

/// Pool figures for one upstream destination (summed over serving threads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolFigures {
    /// `scheme://authority`.
    pub host: String,
    /// Open HTTP/2 connections that take new streams.
    pub connections: u64,
    /// Streams in flight on them.
    pub streams: u64,
    /// Requests waiting for a connection or stream slot.
    pub queued: u64,
}

/// The request body type sent upstream.
pub type UpstreamBody = Replay<Incoming>;

type Connector = RetryConnect<HttpsConnector<egress::Dial>>;

/// Pooled upstream client, shared by every request.
#[derive(Debug, Clone)]
pub struct Client {
    /// TCP connector under every connection (to the upstream or its proxy).
    tcp: HttpConnector,
    /// TLS settings with ALPN offering h2 and http/1.1 (`routes.http2 =
    /// "auto"`), h2 only (`always`), http/1.1 only (`never`).
    tls_auto: Arc<rustls::ClientConfig>,
    tls_h2: Arc<rustls::ClientConfig>,
    tls_h1: Arc<rustls::ClientConfig>,
    connect_retries: u32,
    connect_retry_backoff: Duration,
    connect_timeout: Duration,
    /// Which destinations go through which forward proxy.
    egress: Arc<Egress>,
    h1: Arc<conn::Pool>,
    h2: Arc<h2pool::H2Pool>,
    h2_builder: hyper::client::conn::http2::Builder<hyper_util::rt::TokioExecutor>,
    head_timeout: Option<Duration>,
    /// Longest wait for a new HTTP/2 connection's server preface.
    settings_timeout: Duration,
    queue_timeout: Duration,
}

/// An upstream response body: HTTP/1 bodies drive their own connection
/// (see `upstream/conn.rs`); HTTP/2 streams share a connection task and
/// hold their stream slot until the body ends or is dropped.
#[derive(Debug)]
pub enum ResponseBody {
    /// An HTTP/1 body that drives its own connection.
    Driven(conn::Driven),
    /// An HTTP/2 stream body and the pool lease that holds its stream slot.
    Shared(Incoming, h2pool::Lease),
    /// A body on a connection of its own that runs in its own task (the
    /// answer to an upgrade request that was not `101`).
    Own(Incoming),
}

impl http_body::Body for ResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            ResponseBody::Driven(b) => Pin::new(b).poll_frame(cx),
            ResponseBody::Shared(b, _) | ResponseBody::Own(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Driven(b) => b.is_end_stream(),
            ResponseBody::Shared(b, _) | ResponseBody::Own(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            ResponseBody::Driven(b) => b.size_hint(),
            ResponseBody::Shared(b, _) | ResponseBody::Own(b) => b.size_hint(),
        }
    }
}

/// The client could not be built from its configuration: a CA, client
/// certificate or key file (named with its setting) or the TLS set-up.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BuildError(#[from] pub TlsFileError);

/// Why forwarding failed before a response head arrived.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// TCP connect failed (refused, unreachable, DNS).
    #[error("upstream unreachable: {0}")]
    Connect(String),
    /// The TLS handshake failed (certificate, protocol).
    #[error("upstream TLS handshake failed: {0}")]
    Tls(String),
    /// Connecting or waiting for the response head took too long.
    #[error("upstream timed out: {0}")]
    Timeout(&'static str),
    /// The upstream closed or reset the connection (or, on HTTP/2, reset
    /// the stream or sent GOAWAY) after the request was sent and before a
    /// response head arrived.
    #[error("upstream closed the connection before the response head: {0}")]
    Reset(String),
    /// The upstream broke the HTTP exchange.
    #[error("upstream protocol error: {0}")]
    Protocol(String),
    /// The forward proxy refused the CONNECT or answered it unusably.
    #[error("upstream not reached through the egress proxy: {0}")]
    Proxy(String),
    /// Every HTTP/2 connection to the host was at its stream limit, the
    /// connection cap was reached, and no slot came free in time.
    #[error(
        "no upstream HTTP/2 stream came free within upstream.http2_queue_timeout ({0:?}): \
         every connection to the host is at its stream limit and \
         upstream.http2_max_connections_per_host is reached"
    )]
    QueueTimeout(Duration),
}

impl UpstreamError {
    /// 504 for timeouts, 503 for a full pool, 502 for everything else.
    pub fn status(&self) -> StatusCode {
        match self {
            UpstreamError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            UpstreamError::QueueTimeout(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_GATEWAY,
        }
    }

    /// Stable machine-readable code, used as `error.type` and in the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "upstream_unreachable",
            UpstreamError::Tls(_) => "upstream_tls_error",
            UpstreamError::Timeout(_) => "upstream_timeout",
            UpstreamError::Reset(_) => "upstream_reset",
            UpstreamError::Protocol(_) => "upstream_protocol_error",
            UpstreamError::QueueTimeout(_) => "upstream_queue_timeout",
            UpstreamError::Proxy(_) => "upstream_proxy_error",
        }
    }

    /// The error response sent to the client, in the OpenAI error shape.
    pub fn to_response<B: From<Full<Bytes>>>(&self) -> Response<B> {
        error_response(self.status(), &self.to_string(), self.code())
    }

    /// The same failure as the request path's error type. A full pool is
    /// tokentap's own limit (`http2_max_connections_per_host`), not the
    /// upstream's failure.
    pub fn into_proxy_error(self) -> ProxyError {
        let (status, code) = (self.status(), self.code());
        let side = match self {
            UpstreamError::QueueTimeout(_) => Side::Tokentap,
            _ => Side::Upstream,
        };
        ProxyError::new(side, status, code, self.to_string())
    }

    /// Opening a connection failed: classified, and a forward proxy's
    /// refusal logged as a warning (its cause is the operator's to fix).
    fn connect_failed(err: BoxError) -> UpstreamError {
        let failed = UpstreamError::classify_connect(err);
        if let UpstreamError::Proxy(message) = &failed {
            tracing::warn!(error = %message, "the egress proxy refused an upstream connection");
        }
        failed
    }

    /// Opening a connection failed.
    fn classify_connect(err: BoxError) -> UpstreamError {
        let chain = error_chain(&*err);
        if egress::refusal(&*err).is_some() {
            return UpstreamError::Proxy(chain);
        }
        if is_tls_failure(&*err) {
            return UpstreamError::Tls(chain);
        }
        let timed_out = causes(&*err)
            .filter_map(|e| e.downcast_ref::<std::io::Error>())
            .any(|io| io.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            UpstreamError::Timeout("connect")
        } else {
            UpstreamError::Connect(chain)
        }
    }

    /// The exchange on an open connection failed before the response head.
    fn classify_exchange(err: &(dyn StdError + 'static)) -> UpstreamError {
        let chain = error_chain(err);
        if is_tls_failure(err) {
            return UpstreamError::Tls(chain);
        }
        if causes(err).any(is_reset) {
            UpstreamError::Reset(chain)
        } else {
            UpstreamError::Protocol(chain)
        }
    }
}

/// The peer closed or reset the connection.
fn is_reset_kind(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        kind,
        ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
    )
}

/// A rustls error anywhere in the chain: a certificate or TLS protocol
/// failure.
fn is_tls_failure(err: &(dyn StdError + 'static)) -> bool {
    causes(err).any(|e| e.is::<rustls::Error>())
}

/// `err` and its causes, outermost first.
fn causes<'a>(
    err: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(err), |&e| cause(e))
}

/// The error `e` wraps. `io::Error::source` skips the error an `io::Error`
/// wraps (and connectors nest them: io in io in rustls), so an `io::Error`
/// is followed through `get_ref` instead.
fn cause<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    match e.downcast_ref::<std::io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
        None => e.source(),
    }
}

/// "outer: inner: innermost", without repeats.
fn error_chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    for e in causes(err).skip(1) {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
    }
    out
}

impl Client {
    /// Build the pooled client; `egress` says which destinations go through
    /// which forward proxy. Must run inside the tokio runtime.
    pub fn new(cfg: &UpstreamConfig, egress: Egress) -> Result<Client, BuildError> {
        let tls = ClientTls {
            ca: (cfg.ca_file.as_ref()).map(|p| SettingFile::new("upstream.ca_file", p)),
            identity: None,
        };
        Client::with_tls(cfg, egress, &tls)
    }

    /// [`Client::new`] trusting and presenting what `tls` names instead of
    /// `upstream.ca_file`.
    pub fn with_tls(
        cfg: &UpstreamConfig,
        egress: Egress,
        tls: &ClientTls,
    ) -> Result<Client, BuildError> {
        let tls = tls.config()?;

        let http = egress::tcp_connector(cfg.connect_timeout);
        let alpn = |protocols: &[&[u8]]| {
            let mut c = tls.clone();
            c.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            Arc::new(c)
        };

        let limits = h2pool::Limits {
            max_connections: cfg.http2_max_connections_per_host,
            max_streams: cfg.http2_max_streams_per_connection,
            queue_timeout: cfg.http2_queue_timeout,
            idle_timeout: cfg.pool_idle_timeout,
        };
        Ok(Client {
            tcp: http,
            tls_auto: alpn(&[b"h2", b"http/1.1"]),
            tls_h2: alpn(&[b"h2"]),
            tls_h1: alpn(&[b"http/1.1"]),
            connect_retries: cfg.connect_retries,
            connect_retry_backoff: cfg.connect_retry_backoff,
            connect_timeout: cfg.connect_timeout,
            egress: Arc::new(egress),
            h1: conn::Pool::new(cfg.pool_max_idle_per_host, cfg.pool_idle_timeout),
            h2: h2pool::H2Pool::new(limits),
            h2_builder: h2_builder(cfg),
            head_timeout: cfg.idle_timeout,
            settings_timeout: cfg.connect_timeout,
            queue_timeout: cfg.http2_queue_timeout,
        })
    }

    /// A client for tokentap's own requests (SLO webhooks, OTLP/HTTP
    /// export, demo traffic): what `tls` names beside the webpki roots, no
    /// connect retries, no head timeout (the caller bounds the exchange), a
    /// few idle connections per host, forward proxies as `egress` says.
    pub fn internal(
        connect_timeout: Duration,
        egress: Egress,
        tls: &ClientTls,
    ) -> Result<Client, BuildError> {
        let cfg = UpstreamConfig {
            connect_timeout,
            idle_timeout: None,
            total_timeout: None,
            ca_file: None,
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 2,
            connect_retries: 0,
            connect_retry_backoff: Duration::ZERO,
            drain_timeout: Duration::ZERO,
            drain_max_bytes: 0,
            max_drains: 0,
            ..UpstreamConfig::default()
        };
        Client::with_tls(&cfg, egress, tls)
    }

    /// A connector for one new connection: the ALPN offer `mode` asks for,
    /// through `via` when set (tunnelling plain-HTTP destinations too when
    /// `tunnel_all`).
    fn connector(&self, mode: Http2Mode, via: &egress::Via, tunnel_all: bool) -> Connector {
        let tls = match mode {
            Http2Mode::Auto => &self.tls_auto,
            Http2Mode::Always => &self.tls_h2,
            Http2Mode::Never => &self.tls_h1,
        };
        let dial = egress::Dial {
            tcp: self.tcp.clone(),
            via: via.clone(),
            tunnel_all,
            timeout: self.connect_timeout,
        };
        RetryConnect {
            inner: HttpsConnector::from((dial, tls.clone())),
            retries: self.connect_retries,
            backoff: self.connect_retry_backoff,
        }
    }

    /// Send a request whose whole body is `body` (tokentap's own requests).
    pub async fn send_bytes(
        &self,
        req: Request<Bytes>,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        self.send_bytes_over(req, Http2Mode::default()).await
    }

    /// [`Client::send_bytes`] speaking the HTTP version `mode` asks for
    /// (OTLP/gRPC export: `Always`, h2c with prior knowledge on `http://`).
    pub async fn send_bytes_over(
        &self,
        req: Request<Bytes>,
        mode: Http2Mode,
    ) -> Result<Response<ResponseBody>, UpstreamError> {
        let (parts, body) = req.into_parts();
        self.send(
            Request::from_parts(parts, Replay::full(body)),
            Shard::default(),
            mode,
        )
        .await
        .map(|sent| sent.response)
    }

    /// Send `req` and wait for the response head. Request bytes are never
    /// retried once the server may have processed them: opening the
    /// connection is retried (when `upstream.connect_retries` is set),
    /// hyper re-sends only requests that never left, and an HTTP/2 stream
    /// the server refused unprocessed (REFUSED_STREAM, or above a graceful
    /// GOAWAY's last stream) is sent once more on another connection.
    /// `mode` is the route's `routes[].http2`.
    pub async fn send(
        &self,
        req: Request<UpstreamBody>,
        shard: Shard,
        mode: Http2Mode,
    ) -> Result<Sent, UpstreamError> {
        self.send_via(req, shard, mode, &RouteProxy::Env, None)
            .await
    }

    /// [`Client::send`] for a route whose egress proxy choice is `proxy`
    /// (`routes[].proxy`), setting `sent` (see [`SentMark`]) when the
    /// request goes on a connection.
    pub async fn send_via(
        &self,
        req: Request<UpstreamBody>,
        shard: Shard,
        mode: Http2Mode,
        proxy: &RouteProxy,
        sent: Option<&AtomicBool>,
    ) -> Result<Sent, UpstreamError> {
        let fut = self.exchange(req, shard, mode, proxy, SentMark(sent));
        match self.head_timeout {
            Some(limit) => tokio::time::timeout(limit, fut).await.map_err(|_| {
                UpstreamError::Timeout("no response head within upstream.idle_timeout")
            })?,
            None => fut.await,
        }
    }

    /// Pool figures per HTTP/2 destination, for the pool gauges.
    pub fn pool_figures(&self) -> Vec<PoolFigures> {
        self.h2
            .figures()
            .into_iter()
            .map(|(host, connections, streams, queued)| PoolFigures {
                host,
                connections,
                streams,
                queued,
            })
            .collect()
    }

    async fn exchange(
        &self,
        mut req: Request<UpstreamBody>,
        shard: Shard,
        mode: Http2Mode,
        proxy: &RouteProxy,
        sent: SentMark<'_>,
    ) -> Result<Sent, UpstreamError> {
        #[allow(
            clippy::disallowed_methods,
            reason = "pool wait (`tokentap.upstream.pool.wait`) is timed where the wait happens, before meter sees the request; handed to meter with the response (`Sent::pool_wait`)"
        )]
        let asked = Instant::now();
        let uri = req.uri().clone();
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(UpstreamError::Protocol(format!(
                "not an absolute URI: {uri}"
            )));
        };
        let via = self.egress.via(proxy, &uri);
        // Plain HTTP/1 through a proxy names the destination in the
        // request line (absolute form) instead of a tunnel.
        let absolute = via.is_some() && *scheme == http::uri::Scheme::HTTP;
        let key = (scheme.clone(), authority.clone(), shard, via);
        // A connection found closed before it took the request gives it back
        // unsent; it then goes on another. Pooled connections are tried in
        // turn; a fresh one only once more.
        let mut fresh_tries = 0;
        let mut refused_retry = true;
        loop {
            let conn = self.connection(&key, &uri, mode, &mut fresh_tries).await?;
            let pool_wait = asked.elapsed();
            let unsent = match conn {
                Conn::H2(mut lease) => {
                    // Kept only while a retry is still possible: cheap (the
                    // body's chunks are reference-counted), and only for a
                    // body read completely.
                    let copy = if refused_retry { try_clone(&req) } else { None };
                    sent.set(true);
                    match lease.sender().try_send_request(req).await {
                        Ok(res) => {
                            let response = res.map(|body| ResponseBody::Shared(body, lease));
                            return Ok(Sent {
                                response,
                                pool_wait,
                            });
                        }
                        Err(mut e) => match e.take_message() {
                            Some(back) => {
                                sent.set(false);
                                back
                            }
                            None => {
                                let err = e.into_error();
                                match copy {
                                    Some(copy) if refused_unprocessed(&err) => {
                                        tracing::debug!(error = %error_chain(&err), "upstream refused an HTTP/2 stream unprocessed; sending it on another connection");
                                        lease.retire();
                                        refused_retry = false;
                                        req = copy;
                                        continue;
                                    }
                                    _ => return Err(UpstreamError::classify_exchange(&err)),
                                }
                            }
                        },
                    }
                }
                Conn::H1(h1) => {
                    let added_host = match &key.3 {
                        Some(proxy) if absolute => to_proxy_form(&mut req, proxy),
                        _ => to_h1_form(&mut req),
                    };
                    sent.set(true);
                    match h1.send(req).await {
                        Ok((res, h1)) => {
                            let pool = self.h1.clone();
                            let driven = |body| conn::Driven::new(body, h1, pool, key);
                            let response = res.map(|body| ResponseBody::Driven(driven(body)));
                            return Ok(Sent {
                                response,
                                pool_wait,
                            });
                        }
                        Err(conn::SendError::Unsent(mut back)) => {
                            sent.set(false);
                            // As it came: the next connection may speak HTTP/2.
                            *back.uri_mut() = uri.clone();
                            if added_host {
                                back.headers_mut().remove(header::HOST);
                            }
                            if absolute {
                                back.headers_mut().remove(header::PROXY_AUTHORIZATION);
                            }
                            *back
                        }
                        Err(conn::SendError::Failed(e)) => {
                            return Err(UpstreamError::classify_exchange(&e));
                        }
                    }
                }
            };
            if fresh_tries > 1 {
                return Err(UpstreamError::Reset(
                    "a new connection closed before the request was sent".into(),
                ));
            }
            req = unsent;
        }
    }

    /// Send an upgrade request (WebSocket handshake) on a fresh HTTP/1.1
    /// connection of its own: never pooled, and over TLS offering only
    /// `http/1.1` by ALPN. The connection runs in a task on the current
    /// runtime; after a `101` the response hands its transport over
    /// through `hyper::upgrade::on`.
    pub async fn upgrade<B>(
        &self,
        mut req: Request<B>,
        proxy: &RouteProxy,
    ) -> Result<Response<Incoming>, UpstreamError>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let uri = req.uri().clone();
        let exchange = |e: hyper::Error| UpstreamError::classify_exchange(&e);
        // Through a proxy the upgrade always goes in a tunnel: a proxy
        // forwarding absolute-form requests would not relay the upgrade.
        let via = self.egress.via(proxy, &uri);
        let fut = async {
            let io = self
                .connector(Http2Mode::Never, &via, true)
                .oneshot(uri)
                .await
                .map_err(UpstreamError::connect_failed)?;
            let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
                .handshake(io)
                .await
                .map_err(exchange)?;
            tokio::spawn(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!(error = %e, "upstream upgrade connection ended with an error");
                }
            });
            to_h1_form(&mut req);
            sender.send_request(req).await.map_err(exchange)
        };
        match self.head_timeout {
            Some(limit) => tokio::time::timeout(limit, fut).await.map_err(|_| {
                UpstreamError::Timeout("no response head within upstream.idle_timeout")
            })?,
            None => fut.await,
        }
    }

    /// A connection for the next attempt: an HTTP/2 stream slot when the
    /// route and host allow HTTP/2, else a pooled or new HTTP/1 connection.
    async fn connection(
        &self,
        key: &conn::Key,
        uri: &Uri,
        mode: Http2Mode,
        fresh_tries: &mut u32,
    ) -> Result<Conn, UpstreamError> {
        let h2_possible = match mode {
            Http2Mode::Never => false,
            Http2Mode::Always => true,
            // Without TLS there is no ALPN to offer h2 by.
            Http2Mode::Auto => key.0 == http::uri::Scheme::HTTPS && self.h2.may_be_h2(key),
        };
        if h2_possible {
            let always = mode == Http2Mode::Always;
            let step = self
                .h2
                .acquire(key, always)
                .await
                .map_err(|_| UpstreamError::QueueTimeout(self.queue_timeout))?;
            match step {
                h2pool::Step::Go(lease) => return Ok(Conn::H2(lease)),
                h2pool::Step::Open(opening) => {
                    *fresh_tries += 1;
                    // Boxed: connecting and the handshakes make a large
                    // future, which would otherwise sit inline in every
                    // request's future (and hyper keeps that allocation
                    // for as long as the client connection lives).
                    return Box::pin(self.open(key, uri, mode, Some(opening))).await;
                }
                h2pool::Step::Http1 => {}
            }
        }
        if let Some(h1) = self.h1.checkout(key).await {
            return Ok(Conn::H1(h1));
        }
        *fresh_tries += 1;
        Box::pin(self.open(key, uri, mode, None)).await
    }

    /// Open a connection to `uri`: HTTP/2 when TLS negotiated it (or the
    /// route asks for it), shared from then on; HTTP/1 otherwise.
    async fn open(
        &self,
        key: &conn::Key,
        uri: &Uri,
        mode: Http2Mode,
        opening: Option<h2pool::Opening>,
    ) -> Result<Conn, UpstreamError> {
        // h2c with prior knowledge needs a tunnel; HTTP/1 goes in absolute form.
        let tunnel_all = mode == Http2Mode::Always;
        let io = self
            .connector(mode, &key.3, tunnel_all)
            .oneshot(uri.clone())
            .await
            .map_err(UpstreamError::connect_failed)?;
        let exchange = |e: hyper::Error| UpstreamError::classify_exchange(&e);
        let tls = matches!(io, hyper_rustls::MaybeHttpsStream::Https(_));
        let h2 = match mode {
            Http2Mode::Never => false,
            Http2Mode::Auto => io.connected().is_negotiated_h2(),
            Http2Mode::Always if tls && !io.connected().is_negotiated_h2() => {
                return Err(UpstreamError::Protocol(
                    "the upstream did not pick HTTP/2 in the TLS handshake (ALPN), \
                     and the route sets http2 = \"always\""
                        .into(),
                ));
            }
            Http2Mode::Always => true,
        };
        if !h2 {
            if let Some(opening) = opening {
                opening.http1();
            }
            return Ok(Conn::H1(conn::H1::handshake(io).await.map_err(exchange)?));
        }
        // A connection the HTTP/1 path opened may turn out to speak HTTP/2
        // (the host changed): it joins the HTTP/2 pool all the same.
        let opening = opening.unwrap_or_else(|| self.h2.adopt(key));
        let peer = Arc::new(tap::Peer::new(opening.changed()));
        let io = tap::watch(io, peer.clone());
        let (sender, conn) = self.h2_builder.handshake(io).await.map_err(exchange)?;
        h2pool::spawn_connection(conn);
        // Streams are placed by the server's limit, which its preface
        // (SETTINGS) tells: wait for it rather than guess.
        let preface = tokio::time::timeout(self.settings_timeout, peer.wait_settled());
        if preface.await.is_err() {
            return Err(UpstreamError::Protocol(
                "no HTTP/2 SETTINGS from the upstream within upstream.connect_timeout".into(),
            ));
        }
        Ok(Conn::H2(opening.ready(sender, peer)))
    }
}

/// The HTTP/2 settings tokentap's upstream connections announce. Flow
/// control is fixed, not adaptive: hyper's adaptive window gives the
/// connection the same window as one stream, so one client that stops
/// reading could fill it and stall every other stream on the connection.
/// Here the connection window is the stream window times the most streams
/// a connection carries, so streams whose clients stopped reading can
/// never use it up (see ARCHITECTURE, "Upstream connections").
fn h2_builder(
    cfg: &UpstreamConfig,
) -> hyper::client::conn::http2::Builder<hyper_util::rt::TokioExecutor> {
    // Validated to fit (16 KiB to 2^31 - 1).
    let stream = u32::try_from(cfg.http2_stream_window).unwrap_or(0x7fff_ffff);
    let connection = u64::from(stream)
        .saturating_mul(u64::from(cfg.http2_max_streams_per_connection))
        .min(0x7fff_ffff) as u32;
    let mut b = hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new());
    b.timer(hyper_util::rt::TokioTimer::new())
        .adaptive_window(false)
        .initial_stream_window_size(stream)
        .initial_connection_window_size(connection);
    b
}

/// A copy of `req` to send again if the server refuses it unprocessed;
/// `None` when its body is still partly with the client.
fn try_clone(req: &Request<UpstreamBody>) -> Option<Request<UpstreamBody>> {
    let body = req.body().try_clone()?;
    let mut copy = Request::new(body);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// The server said it did not process the stream: RST_STREAM with
/// REFUSED_STREAM, or a graceful GOAWAY (NO_ERROR) whose last stream id is
/// below it (RFC 9113 §8.7). An abrupt GOAWAY (an error code) may also end
/// streams the server did process, so it is not retried.
fn refused_unprocessed(err: &(dyn StdError + 'static)) -> bool {
    causes(err)
        .filter_map(|e| e.downcast_ref::<h2::Error>())
        .any(|h2| {
            h2.is_remote()
                && ((h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM))
                    || (h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR)))
        })
}

/// A connection a request can go on.
enum Conn {
    H1(conn::H1),
    H2(h2pool::Lease),
}

/// Longest wait between two connect attempts.
const MAX_CONNECT_BACKOFF: Duration = Duration::from_secs(2);

/// A connector that tries again when opening a connection fails: TCP
/// connect refused, unreachable or timed out, or the connection dropped
/// during the TLS handshake. The request is not involved at all (hyper
/// writes it only to a connection this returns), so nothing is ever sent
/// twice. A certificate or TLS protocol error is final: the same server
/// would fail the same way.
#[derive(Debug, Clone)]
pub struct RetryConnect<C> {
    inner: C,
    retries: u32,
    backoff: Duration,
}

impl<C> RetryConnect<C> {
    /// The wait before retry number `n` (0-based): doubling, capped.
    fn delay(&self, n: u32) -> Duration {
        self.backoff
            .saturating_mul(2u32.saturating_pow(n))
            .min(MAX_CONNECT_BACKOFF)
    }
}

impl<C> Service<Uri> for RetryConnect<C>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Response: Send,
    C::Future: Send,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let first = self.inner.call(uri.clone());
        let this = self.clone();
        Box::pin(async move {
            let mut result = first.await.map_err(Into::into);
            for n in 0..this.retries {
                let err = match result {
                    Ok(conn) => return Ok(conn),
                    // The same server (or proxy) would fail the same way.
                    Err(e) if is_tls_failure(&*e) || egress::refusal(&*e).is_some() => {
                        return Err(e);
                    }
                    Err(e) => e,
                };
                let wait = this.delay(n);
                tracing::debug!(%uri, error = %error_chain(&*err), retry = n + 1, ?wait, "upstream connect failed; retrying");
                tokio::time::sleep(wait).await;
                result = this
                    .inner
                    .clone()
                    .oneshot(uri.clone())
                    .await
                    .map_err(Into::into);
            }
            result
        })
    }
}

/// The peer closed or reset the connection or stream: at the socket, as an
/// incomplete HTTP/1 message, or as an HTTP/2 RST_STREAM or GOAWAY.
fn is_reset(e: &(dyn StdError + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| is_reset_kind(io.kind()))
        || e.downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        || e.downcast_ref::<h2::Error>()
            .is_some_and(|h2| h2.is_remote() && (h2.is_reset() || h2.is_go_away()))
}

/// Put `req` in the form HTTP/1 sends: origin-form target, and a `Host`
/// header from the URI (with the port unless it is the scheme's default).
/// Returns whether `Host` was added.
fn to_h1_form<B>(req: &mut Request<B>) -> bool {
    let uri = req.uri().clone();
    let mut added = false;
    if !req.headers().contains_key(header::HOST)
        && let Some(host) = uri.host()
    {
        let default = match uri.scheme_str() {
            Some("https") => 443,
            _ => 80,
        };
        let value = match uri.port_u16() {
            // The authority is `host:port` already, unless it has a user
            // part (never sent as `Host`) or a port with leading zeros.
            Some(port) if port != default => match uri.authority() {
                Some(a)
                    if !a.as_str().contains('@')
                        && a.port().is_some_and(|p| !p.as_str().starts_with('0')) =>
                {
                    header::HeaderValue::from_str(a.as_str())
                }
                _ => header::HeaderValue::from_str(&format!("{host}:{port}")),
            },
            _ => header::HeaderValue::from_str(host),
        };
        if let Ok(value) = value {
            req.headers_mut().insert(header::HOST, value);
            added = true;
        }
    }
    let target = uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    *req.uri_mut() = Uri::from(target);
    added
}

/// Put `req` in the form a forward proxy takes for plain HTTP: the
/// absolute URI as the request target, `Host` from it, and the proxy's
/// credentials. Returns whether `Host` was added.
fn to_proxy_form<B>(req: &mut Request<B>, proxy: &crate::config::proxy::ProxyUrl) -> bool {
    let uri = req.uri().clone();
    let added = to_h1_form(req);
    *req.uri_mut() = uri;
    if let Some(auth) = proxy.authorization() {
        req.headers_mut()
            .insert(header::PROXY_AUTHORIZATION, auth.clone());
    }
    added
}

/// Hop-by-hop headers (RFC 9110 §7.6.1), plus the proxy-only ones.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Remove hop-by-hop headers, including every header named in `Connection`.
/// `Trailer` is kept: it describes the end-to-end message.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most heads carry none: one pass over the names is cheaper than a
    // hashed `remove` per hop-by-hop name. With no `Connection` nothing
    // else is named either.
    if !headers.keys().any(|k| HOP_BY_HOP.contains(k)) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h1_form_writes_host_with_a_port_only_when_it_is_not_the_default() {
        for (uri, host) in [
            ("http://h.example:8080/x?q=1", "h.example:8080"),
            ("http://user:pw@h.example:8080/", "h.example:8080"),
            ("http://h.example:08080/", "h.example:8080"),
            ("http://[::1]:9000/", "[::1]:9000"),
            ("http://h.example:80/", "h.example"),
            ("https://h.example:443/", "h.example"),
            ("https://h.example:80/", "h.example:80"),
            ("http://h.example/", "h.example"),
        ] {
            let mut req = Request::new(());
            *req.uri_mut() = uri.parse().expect("uri");
            assert!(to_h1_form(&mut req), "{uri}");
            assert_eq!(req.headers()[header::HOST], host, "{uri}");
            assert!(req.uri().authority().is_none(), "origin form: {uri}");
        }
        let mut req = Request::new(());
        *req.uri_mut() = "http://h.example:8080/".parse().expect("uri");
        req.headers_mut()
            .insert(header::HOST, header::HeaderValue::from_static("kept"));
        assert!(!to_h1_form(&mut req), "a Host already there is kept");
        assert_eq!(req.headers()[header::HOST], "kept");
    }

    fn head(fields: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for &(k, v) in fields {
            h.append(k, v.parse().expect("hv"));
        }
        h
    }

    #[test]
    fn a_head_without_hop_by_hop_headers_is_left_as_it_was() {
        let mut h = head(&[
            ("content-type", "application/json"),
            ("x-a", "1"),
            ("x-a", "2"),
            ("authorization", "Bearer k"),
        ]);
        let before = h.clone();
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before);
        h.append("keep-alive", "timeout=5".parse().expect("hv"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h, before, "one hop-by-hop header is enough to strip");
    }

    #[test]
    fn strips_hop_by_hop_and_connection_named_headers() {
        let mut h = head(&[
            ("connection", "keep-alive, X-Custom-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-custom-hop", "1"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-authorization", "Basic abc"),
            ("content-type", "application/json"),
            ("content-length", "10"),
            ("authorization", "Bearer k"),
        ]);
        strip_hop_by_hop(&mut h);
        let mut left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["authorization", "content-length", "content-type"]);
    }

    #[test]
    fn error_body_is_openai_shaped() {
        let err = UpstreamError::Connect("connection refused".into());
        let res: Response<Full<Bytes>> = err.to_response();
        assert_eq!(res.status(), StatusCode::BAD_GATEWAY);
        assert_eq!(
            UpstreamError::Timeout("x").status(),
            StatusCode::GATEWAY_TIMEOUT
        );
    }

    #[test]
    fn connect_backoff_doubles_and_is_capped() {
        let c = RetryConnect {
            inner: (),
            retries: 10,
            backoff: Duration::from_millis(100),
        };
        let waits: Vec<u128> = (0..6).map(|n| c.delay(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000]);
        assert_eq!(c.delay(u32::MAX), MAX_CONNECT_BACKOFF, "no overflow");
    }

    #[test]
    fn tls_failure_is_found_inside_nested_io_errors() {
        // hyper-rustls hands back io(Other, io(InvalidData, rustls::Error)).
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, tls);
        let outer = std::io::Error::other(inner);
        assert!(is_tls_failure(&outer), "rustls error two io errors deep");
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(!is_tls_failure(&std::io::Error::other(refused)));
        assert!(
            error_chain(&outer).contains("UnknownIssuer"),
            "{}",
            error_chain(&outer)
        );
    }

    #[test]
    fn codes_and_statuses_are_stable() {
        let cases = [
            (
                UpstreamError::Connect(String::new()),
                502,
                "upstream_unreachable",
            ),
            (UpstreamError::Tls(String::new()), 502, "upstream_tls_error"),
            (UpstreamError::Timeout("x"), 504, "upstream_timeout"),
            (UpstreamError::Reset(String::new()), 502, "upstream_reset"),
            (
                UpstreamError::Protocol(String::new()),
                502,
                "upstream_protocol_error",
            ),
        ];
        for (err, status, code) in cases {
            assert_eq!(err.status().as_u16(), status, "{code}");
            assert_eq!(err.code(), code);
        }
    }

    #[tokio::test]
    async fn missing_ca_file_names_the_key_and_path() {
        let cfg = UpstreamConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..UpstreamConfig::default()
        };
        let err = Client::new(&cfg, Egress::default()).expect_err("missing file");
        assert!(
            err.to_string()
                .starts_with("upstream.ca_file /nonexistent/ca.pem: "),
            "{err}"
        );
    }
}
