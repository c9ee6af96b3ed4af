//! One request's path through the stages, as named steps: admit (route,
//! target), read the request (sniff, tenant, facts), prepare the upstream
//! request, send it, take the response head, meter the body. Every way out
//! with an error goes through `Failure::respond`, the one exit that records.

use std::borrow::Cow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::request::Parts;
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;

use super::State;
use crate::app::websocket;
use crate::config::{Http2Mode, OnClientDisconnect, SessionSource};
use crate::error::{BoxError, ProxyError, Side};
use crate::meter::body::{Meter, MeteredBody};
use crate::meter::drain::DrainLimits;
use crate::meter::{Arrival, RequestBody, RequestFacts, Unmetered};
use crate::providers::{self, ContentType, Operation, Parser, ProviderKind, ResponseFormat};
use crate::rewrite;
use crate::route::{self, Route};
use crate::server::tls::ClientIdentity;
use crate::sniff::{self, Replay, Sniffed};
use crate::upstream::{self, ResponseBody, Shard, UpstreamBody, sigv4};

/// The response body served to clients.
#[derive(Debug)]
pub enum ProxyBody {
    /// An upstream body, metered on its way through.
    Metered(Box<MeteredBody<ResponseBody>>),
    /// A response tokentap wrote itself (errors).
    Local(Full<Bytes>),
}

impl From<Full<Bytes>> for ProxyBody {
    fn from(body: Full<Bytes>) -> Self {
        ProxyBody::Local(body)
    }
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ProxyBody::Metered(b) => Pin::new(b.as_mut()).poll_frame(cx),
            ProxyBody::Local(b) => Pin::new(b).poll_frame(cx).map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProxyBody::Metered(b) => b.is_end_stream(),
            ProxyBody::Local(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Metered(b) => b.size_hint(),
            ProxyBody::Local(b) => b.size_hint(),
        }
    }
}

/// Walk one request through the stages.
pub(super) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
    shard: Shard,
) -> Response<ProxyBody> {
    let arrival = Arrival::now();
    match forward(&state, req, arrival, shard).await {
        Ok(res) => res,
        Err(failure) => failure.respond(),
    }
}

/// A request that ends with an answer tokentap writes itself, and how it
/// is recorded.
struct Failure {
    error: ProxyError,
    record: Record,
}

/// How a failed request is recorded.
enum Record {
    /// Refused before metering began (no route, a bad target): these are
    /// deliberately unmetered, since no route means no route label; they
    /// are logged at debug level.
    Unmetered,
    /// The request is metered: the failure is its measurement.
    Fail(Box<Meter>),
    /// The client went away while its body was read: dropping the meter
    /// records `client_cancelled`.
    Cancelled(Box<Meter>),
}

impl Failure {
    fn unmetered(error: ProxyError) -> Failure {
        Failure {
            error,
            record: Record::Unmetered,
        }
    }

    fn metered(error: ProxyError, meter: Meter) -> Failure {
        Failure {
            error,
            record: Record::Fail(Box::new(meter)),
        }
    }

    /// The one exit for errors: record, then answer.
    fn respond(self) -> Response<ProxyBody> {
        let Failure { error, record } = self;
        match record {
            Record::Unmetered => {
                tracing::debug!(code = error.code(), error = %error, "request refused before routing");
            }
            Record::Fail(mut meter) => {
                tracing::debug!(route = %meter.facts().route, code = error.code(), error = %error, "request failed");
                let cause = error.to_string();
                if error.side() == Side::Upstream {
                    UPSTREAM_WARNINGS.warn(&meter.facts().route, error.code(), &cause);
                }
                meter.fail_because(error.status().as_u16(), error.code(), Some(&cause));
            }
            Record::Cancelled(meter) => drop(meter),
        }
        error.to_response()
    }
}

/// Upstream failures (no response head) are logged at WARN at most once
/// per this interval; the line says how many more there were since.
const UPSTREAM_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// The rate limit of the upstream-failure WARN, shared by every thread.
static UPSTREAM_WARNINGS: RateLimitedWarn = RateLimitedWarn::new();

/// One WARN per [`UPSTREAM_WARN_EVERY`]: the first failure logs at once,
/// later ones within the interval are counted and reported with the next.
struct RateLimitedWarn {
    /// Milliseconds since `epoch` of the last WARN, plus one (0 = never).
    last: std::sync::atomic::AtomicU64,
    suppressed: std::sync::atomic::AtomicU64,
    epoch: std::sync::OnceLock<std::time::Instant>,
}

impl RateLimitedWarn {
    const fn new() -> RateLimitedWarn {
        RateLimitedWarn {
            last: std::sync::atomic::AtomicU64::new(0),
            suppressed: std::sync::atomic::AtomicU64::new(0),
            epoch: std::sync::OnceLock::new(),
        }
    }

    #[allow(
        clippy::disallowed_methods,
        reason = "a log rate limit, not a measurement"
    )]
    fn warn(&self, route: &str, code: &str, cause: &str) {
        use std::sync::atomic::Ordering::Relaxed;
        let epoch = *self.epoch.get_or_init(std::time::Instant::now);
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX) + 1;
        let last = self.last.load(Relaxed);
        let every = u64::try_from(UPSTREAM_WARN_EVERY.as_millis()).unwrap_or(u64::MAX);
        let due = last == 0 || now.saturating_sub(last) >= every;
        if !due
            || self
                .last
                .compare_exchange(last, now, Relaxed, Relaxed)
                .is_err()
        {
            self.suppressed.fetch_add(1, Relaxed);
            return;
        }
        let more = self.suppressed.swap(0, Relaxed);
        tracing::warn!(
            route,
            error = code,
            cause,
            more_since_last_warning = more,
            "upstream request failed before a response; further failures are logged at most \
             every {}s (each is in the access log)",
            UPSTREAM_WARN_EVERY.as_secs()
        );
    }
}

/// The steps in order; each `?` leaves through `Failure::respond`.
async fn forward(
    state: &State,
    req: Request<Incoming>,
    arrival: Arrival,
    shard: Shard,
) -> Result<Response<ProxyBody>, Failure> {
    let admitted = admit(state, &req).map_err(Failure::unmetered)?;
    if websocket::is_upgrade(&req) {
        return Ok(websocket_session(state, admitted, req, arrival).await);
    }
    let (parts, body) = req.into_parts();
    // The verified client certificate's subject, on mTLS connections.
    let client_cert = parts
        .extensions
        .get::<ClientIdentity>()
        .map(|c| c.0.clone());
    let read = read_request(
        state,
        &admitted,
        &parts.headers,
        client_cert.as_deref(),
        body,
        arrival,
    )
    .await?;
    let client_version = parts.version;
    let (upstream_req, mut prepared) = prepare(state, &admitted, parts, read)?;
    prepared.meter.on_send();
    let res = match state
        .client
        .send_via(
            upstream_req,
            shard,
            admitted.route.http2,
            &admitted.route.proxy,
            prepared.meter.sent_flag(),
        )
        .await
    {
        Ok(sent) => {
            prepared.meter.on_pool_wait(sent.pool_wait);
            sent.response
        }
        Err(e) => {
            let mut meter = prepared.meter;
            if let upstream::UpstreamError::QueueTimeout(waited) = e {
                meter.on_pool_wait(waited);
            }
            return Err(Failure::metered(e.into_proxy_error(), meter));
        }
    };
    Ok(take_head(state, &admitted, res, prepared, client_version))
}

/// What the request head alone decides: its route and upstream target.
struct Admitted<'s> {
    route: &'s Route,
    upstream_uri: Uri,
    operation: Option<Operation>,
    provider: Option<ProviderKind>,
    /// The path after the route prefix.
    path: String,
}

/// Step 1: find the route and the upstream target, or refuse.
fn admit<'s>(state: &'s State, req: &Request<Incoming>) -> Result<Admitted<'s>, ProxyError> {
    let Some(route) = state.router.find(request_host(req), req.uri().path()) else {
        state
            .telemetry
            .record_no_route(req.method(), req.uri().path());
        return Err(ProxyError::client(
            StatusCode::NOT_FOUND,
            "no_route",
            no_route_message(&state.config.routes, req.uri().path()),
        ));
    };
    let upstream_uri = route.upstream_uri(req.uri()).map_err(|e| {
        ProxyError::client(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("bad request target: {e}"),
        )
    })?;
    let path = route.strip(req.uri().path()).unwrap_or(req.uri().path());
    let operation = Operation::from_request(req.method().as_str(), path);
    Ok(Admitted {
        route,
        upstream_uri,
        operation,
        provider: route
            .provider
            .or_else(|| ProviderKind::detect_operation(path, operation)),
        path: path.to_owned(),
    })
}

/// The 404 message: the path, and the routes that exist, so a client
/// with the wrong base URL learns the right one.
fn no_route_message(routes: &[crate::config::RouteConfig], path: &str) -> String {
    let listed: Vec<String> = routes
        .iter()
        .map(|r| match &r.host {
            Some(h) => format!("{} (host {h}, route {})", r.prefix, r.name),
            None => format!("{} (route {})", r.prefix, r.name),
        })
        .collect();
    format!(
        "no route matches {path}; configured prefixes: {}",
        listed.join(", ")
    )
}

/// The request's host without port: the URI authority (HTTP/2, absolute
/// form) or the `Host` header.
fn request_host<B>(req: &Request<B>) -> Option<&str> {
    if let Some(host) = req.uri().host() {
        return Some(host);
    }
    let host = req.headers().get(header::HOST)?.to_str().ok()?;
    // Keep IPv6 literals intact: strip only a trailing `:port`.
    Some(match host.rfind(':') {
        Some(i) if !host[i..].contains(']') => &host[..i],
        _ => host,
    })
}

/// What reading the request body told.
struct ReadRequest {
    facts: RequestFacts,
    sniffed: Sniffed,
    body: Replay<Incoming>,
}

/// Step 2: read the body (up to the sniff limit) and settle the facts the
/// measurement carries: model, stream, tenant.
async fn read_request(
    state: &State,
    admitted: &Admitted<'_>,
    headers: &HeaderMap,
    client_cert: Option<&str>,
    body: Incoming,
    arrival: Arrival,
) -> Result<ReadRequest, Failure> {
    // A client that goes away while its body is still being read is
    // recorded too (as cancelled, before anything was forwarded): the
    // facts known so far, recorded if this future is dropped.
    let unread = UnreadGuard {
        state,
        admitted,
        arrival,
    };
    let sessions = &state.config.sessions;
    let session_field = sessions
        .sources
        .contains(&SessionSource::Body)
        .then(|| sessions.body_field.keys());
    let limit = state.config.sniff.max_body_bytes;
    let Ok((sniffed, body)) = sniff::sniff_with(headers, body, limit, session_field).await else {
        let error = ProxyError::client(
            StatusCode::BAD_REQUEST,
            "client_body_error",
            "the request body ended early",
        );
        let record = Record::Cancelled(Box::new(unread.into_meter()));
        return Err(Failure { error, record });
    };
    unread.disarm();
    let tenant = route::resolve_tenant_with_cert(
        &state.config.tenant,
        headers,
        sniffed.user.as_deref(),
        client_cert,
    );
    let request_model = sniffed
        .model
        .clone()
        .or_else(|| providers::model_from_path(&admitted.path).map(Cow::into_owned));
    let facts = RequestFacts {
        stream: providers::request_streams(admitted.operation, sniffed.stream),
        request_model,
        tenant,
        session: route::resolve_session(sessions, headers, sniffed.session.as_deref()),
        request_body: sniffed.body,
        service_tier: sniffed.service_tier,
        ..admitted.facts(arrival)
    };
    Ok(ReadRequest {
        facts,
        sniffed,
        body,
    })
}

impl Admitted<'_> {
    /// The facts known from the head alone.
    fn facts(&self, arrival: Arrival) -> RequestFacts {
        RequestFacts {
            route: self.route.name.clone(),
            route_labels: self.route.labels.clone(),
            provider: self.provider.unwrap_or(ProviderKind::Openai),
            operation: self.operation,
            request_model: None,
            stream: false,
            tenant: None,
            session: None,
            server_address: self.route.server_address.clone(),
            server_port: self.route.server_port,
            request_body: RequestBody::Unread,
            service_tier: None,
            start_wall: arrival.wall,
            start: arrival.at,
        }
    }
}

/// Records a cancelled request if dropped while the request body is read.
struct UnreadGuard<'a> {
    state: &'a State,
    admitted: &'a Admitted<'a>,
    arrival: Arrival,
}

impl UnreadGuard<'_> {
    fn disarm(self) {
        std::mem::forget(self);
    }

    /// The meter of a request whose body was never read; dropping it
    /// records `client_cancelled`.
    fn into_meter(self) -> Meter {
        let meter = self.meter();
        self.disarm();
        meter
    }

    fn meter(&self) -> Meter {
        let facts = self.admitted.facts(self.arrival);
        let telemetry = self.state.telemetry.begin(&facts, &HeaderMap::new());
        let mut meter = Meter::new(facts, Box::new(telemetry));
        meter.watch_shutdown(&self.state.shutdown);
        meter
    }
}

impl Drop for UnreadGuard<'_> {
    fn drop(&mut self) {
        drop(self.meter());
    }
}

/// A request on its way upstream, with its meter and whether its body was
/// rewritten to ask for usage.
struct Prepared {
    meter: Meter,
    injected: bool,
}

/// Step 3: the upstream request: same method, headers and body bytes, with
/// opt-in usage injection, hop-by-hop headers and Host dropped (hyper
/// writes Host / :authority from the URI), trace context injected, and a
/// SigV4 signature for the upstream host where the route asks for one.
fn prepare(
    state: &State,
    admitted: &Admitted<'_>,
    mut parts: Parts,
    read: ReadRequest,
) -> Result<(Request<UpstreamBody>, Prepared), Failure> {
    let ReadRequest {
        facts,
        sniffed,
        mut body,
    } = read;
    let injected = injected_body(admitted, &sniffed, &body);
    if let Some(rewritten) = &injected {
        parts
            .headers
            .insert(header::CONTENT_LENGTH, rewritten.len().into());
        body = Replay::full(rewritten.clone());
    }
    let telemetry = state.telemetry.begin(&facts, &parts.headers);
    upstream::strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    telemetry.inject(&mut parts.headers);
    parts.uri = admitted.upstream_uri.clone();
    parts.version = Version::HTTP_11;
    let stream = facts.stream;
    let mut meter = Meter::new(facts, Box::new(telemetry));
    meter.track_sent(false);
    meter.watch_shutdown(&state.shutdown);
    // Streams that will carry no usage get their tokens counted afterwards.
    if stream && sniffed.include_usage != Some(true) && injected.is_none() {
        let model = meter.facts().request_model.as_deref();
        if let Some(plan) = state.tokenizer.plan(model, body.whole()) {
            meter.count_tokens_with(plan);
        }
    }
    if let Some(op) = admitted.operation.filter(|op| op.reads_stored_response()) {
        // A background response goes on after its client leaves, and one
        // read back by id is still running or already counted: without
        // the final usage, nothing of it is counted here.
        let goes_on = sniffed.background == Some(true) || op != Operation::Responses;
        meter.count_once_with(state.ledger.clone(), goes_on);
    }
    let batch = admitted.operation.filter(|op| op.is_batch_file());
    if let Some((op, id)) = batch.and_then(|_| providers::batch_file(&admitted.path)) {
        let namespace = match op {
            Operation::BatchResults => "batch",
            _ => "file",
        };
        meter.count_batch_once_with(state.ledger.clone(), namespace, id.to_owned());
    }
    if let Some(cfg) = &admitted.route.sigv4 {
        // The client signed for tokentap's address; sign again for the upstream.
        let signed = match body.whole() {
            None => Err(ProxyError::client(
                StatusCode::PAYLOAD_TOO_LARGE,
                "sigv4_body_too_large",
                "request body over sniff.max_body_bytes cannot be SigV4-signed",
            )),
            Some(bytes) => sigv4::sign(&mut parts, &bytes, cfg, std::time::SystemTime::now())
                .map_err(|e| {
                    ProxyError::tokentap(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "sigv4_signing_failed",
                        e.to_string(),
                    )
                }),
        };
        if let Err(error) = signed {
            return Err(Failure::metered(error, meter));
        }
    }
    let injected = injected.is_some();
    Ok((
        Request::from_parts(parts, body),
        Prepared { meter, injected },
    ))
}

/// The request body with `stream_options.include_usage` added, when the
/// route opts in and the request is an OpenAI-format stream that did not
/// mention `stream_options` (an explicit `include_usage: false` is respected).
fn injected_body(
    admitted: &Admitted<'_>,
    sniffed: &Sniffed,
    body: &Replay<Incoming>,
) -> Option<Bytes> {
    let eligible = admitted.route.inject_usage
        && admitted.provider == Some(ProviderKind::Openai)
        && matches!(
            admitted.operation,
            Some(Operation::ChatCompletions | Operation::Completions)
        )
        && sniffed.stream == Some(true)
        && !sniffed.has_stream_options;
    if !eligible {
        return None;
    }
    rewrite::add_include_usage(&body.whole()?)
}

/// Steps 5 and 6: take the response head (format, parser, headers for the
/// client) and wrap the body in the meter.
fn take_head(
    state: &State,
    admitted: &Admitted<'_>,
    res: Response<ResponseBody>,
    prepared: Prepared,
    client_version: Version,
) -> Response<ProxyBody> {
    let Prepared {
        mut meter,
        injected,
    } = prepared;
    let (mut head, body) = res.into_parts();
    let content_type = head
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // The format is read once; detection, the parser and the meter share it.
    let format = ContentType::parse(content_type);
    let is_sse = format.format == ResponseFormat::Sse;
    let operation = meter.facts().operation;
    let provider = admitted
        .provider
        .or_else(|| ProviderKind::detect_format(&format));
    let route = admitted.route;
    // A downloaded file's Content-Type says nothing (octet-stream,
    // binary): its first line decides.
    let batch_file = operation.filter(|op| op.is_batch_file() && head.status.is_success());
    let parser = match (provider, batch_file) {
        (None, _) => Err(Unmetered::UnknownFormat(
            "no provider configured or detected from the path or content type".into(),
        )),
        (Some(kind), Some(op)) => Ok(Parser::for_batch_file(
            kind,
            op,
            state.config.meter.max_frame_bytes,
        )),
        (Some(kind), None) => Parser::for_format(
            kind,
            operation,
            format.format,
            state.config.meter.max_frame_bytes,
        )
        .ok_or_else(|| Unmetered::UnknownFormat(format!("content-type {content_type:?}"))),
    };
    let encoding = head
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    meter.on_head(head.status.as_u16(), format.is_stream(), parser, encoding);
    meter.on_served_by(&head.headers);

    // Restore the stream the client asked for (plain SSE only; a compressed
    // body is forwarded as it came).
    let strip =
        injected && is_sse && encoding.is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
    upstream::strip_hop_by_hop(&mut head.headers);
    head.version = client_version;
    if strip {
        head.headers.remove(header::CONTENT_LENGTH);
    }
    let upstream_cfg = &state.config.upstream;
    let mut body = MeteredBody::new(
        body,
        meter,
        upstream_cfg.idle_timeout,
        upstream_cfg.total_timeout,
    );
    if strip {
        body = body.strip_injected_usage();
    }
    if let OnClientDisconnect::Drain { timeout } = route.disconnect {
        let max_bytes = upstream_cfg.drain_max_bytes as u64;
        let limits = DrainLimits { timeout, max_bytes };
        body = body.drain_on_disconnect(state.drains.clone(), limits);
    }
    Response::from_parts(head, ProxyBody::Metered(Box::new(body)))
}

/// A WebSocket upgrade: the handshake forwarded, then the session relayed
/// (`websocket`); an upstream answer other than `101` is metered like any
/// response.
async fn websocket_session(
    state: &State,
    admitted: Admitted<'_>,
    req: Request<Incoming>,
    arrival: Arrival,
) -> Response<ProxyBody> {
    let (route, path) = (admitted.route, admitted.path.as_str());
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let provider = route
        .provider
        .or_else(|| websocket::provider_for_path(&path_and_query))
        .or_else(|| ProviderKind::detect(path));
    let facts = RequestFacts {
        route: route.name.clone(),
        route_labels: route.labels.clone(),
        provider: provider.unwrap_or(ProviderKind::Openai),
        operation: Some(Operation::Responses),
        request_model: websocket::model_from_path(&path_and_query),
        stream: true,
        tenant: route::resolve_tenant(&state.config.tenant, req.headers(), None),
        session: route::resolve_session(&state.config.sessions, req.headers(), None),
        server_address: route.server_address.clone(),
        server_port: route.server_port,
        request_body: RequestBody::Empty,
        service_tier: None,
        start_wall: arrival.wall,
        start: arrival.at,
    };
    let handshake = websocket::Handshake {
        client: &state.client,
        telemetry: &state.telemetry,
        ws_sessions: &state.ws_sessions,
        config: state.config.websocket.clone(),
        upstream_uri: admitted.upstream_uri,
        facts,
        path_and_query,
        upstream_http2_only: route.http2 == Http2Mode::Always,
        proxy: route.proxy.clone(),
    };
    match websocket::upgrade(handshake, req).await {
        websocket::Answer::Local(res) => res.map(ProxyBody::Local),
        websocket::Answer::Upstream(res, mut meter) => {
            let (head, body) = res.into_parts();
            let content_type = head
                .headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let parser = Parser::new(
                meter.facts().provider,
                meter.facts().operation,
                content_type,
                state.config.meter.max_frame_bytes,
            )
            .ok_or_else(|| Unmetered::UnknownFormat(format!("content-type {content_type:?}")));
            let encoding = head
                .headers
                .get(header::CONTENT_ENCODING)
                .and_then(|v| v.to_str().ok());
            meter.on_head(head.status.as_u16(), false, parser, encoding);
            let cfg = &state.config.upstream;
            let body = ResponseBody::Own(body);
            let body = MeteredBody::new(body, *meter, cfg.idle_timeout, cfg.total_timeout);
            Response::from_parts(head, ProxyBody::Metered(Box::new(body)))
        }
    }
}
