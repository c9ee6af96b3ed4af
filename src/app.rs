//! Wiring: a validated `Config` in, a running proxy out. The only module
//! that knows every stage; `handle` walks one request through them.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header;
use http::{Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::admin::{self, Admin, AdminState, ConfigView, Readiness};
use crate::config::{Config, ConfigError, OnClientDisconnect, UpstreamConfig};
use crate::meter::body::{BoxError, Meter, MeteredBody};
use crate::meter::drain::{DrainLimits, Drains};
use crate::meter::tokenize::Tokenizer;
use crate::meter::{RequestFacts, Unmetered};
use crate::providers::{self, Operation, Parser, ProviderKind, sigv4};
use crate::reload::ReloadError;
use crate::route::{self, Route, Router};
use crate::server::Shards;
use crate::server::tls::{ClientIdentity, Tls};
use crate::sniff::{Replay, Sniffed};
use crate::telemetry::Telemetry;
use crate::upstream::{self, Client};
use crate::{rewrite, sniff};

/// How long stopped drains get to record before telemetry is flushed.
const DRAIN_STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Everything a request needs for one configuration: built at start-up and
/// again by each reload. A request keeps the snapshot it started with.
#[derive(Debug)]
struct State {
    config: Config,
    router: Router,
    client: Client,
    telemetry: Arc<Telemetry>,
    tokenizer: Arc<Tokenizer>,
    /// Upstream bodies read on after their client left (drain routes).
    drains: Arc<Drains>,
}

/// A running tokentap instance.
#[derive(Debug)]
pub struct Running {
    /// The proxy's bound address (useful when configured with port 0).
    pub addr: SocketAddr,
    /// The admin listener's bound address; `None` when admin is off (or
    /// its default address was taken).
    pub admin_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    server: Shards,
    admin: Option<Admin>,
    readiness: Readiness,
    telemetry: Arc<Telemetry>,
    tokenizer: Arc<Tokenizer>,
    /// The snapshot new requests load (lock-free); `reload` swaps it whole.
    state: Arc<ArcSwap<State>>,
    /// What `/config` shows.
    config_view: ConfigView,
    drains: Arc<Drains>,
    shutdown_grace: std::time::Duration,
    /// The proxy listener's TLS, reloaded with the configuration.
    tls: Option<Arc<Tls>>,
    /// The admin listener's TLS, reloaded with the configuration.
    admin_tls: Option<Arc<Tls>>,
}

impl Running {
    /// Report not-ready on `/readyz`, stop accepting, let in-flight requests
    /// finish within the configured grace period, stop the admin listener
    /// (it answers throughout the drain), then flush telemetry.
    pub async fn shutdown(mut self) {
        let grace_ends = tokio::time::Instant::now() + self.shutdown_grace;
        self.readiness.set_draining();
        let _ = self.stop.send(true);
        self.server.served().await;
        // Drains (clients already gone) get what is left of the grace period,
        // then stop and record what they have.
        let _ = tokio::time::timeout_at(grace_ends, self.drains.wait_idle()).await;
        if self.drains.active() > 0 {
            tracing::warn!(
                drains = self.drains.active(),
                "shutdown grace expired; stopping drains"
            );
        }
        self.drains.stop();
        let _ = tokio::time::timeout(DRAIN_STOP_WAIT, self.drains.wait_idle()).await;
        if let Some(admin) = self.admin {
            admin.shutdown().await;
        }
        let (telemetry, tokenizer) = (self.telemetry, self.tokenizer);
        let _ = tokio::task::spawn_blocking(move || {
            // Measurements still being counted are recorded before the flush.
            tokenizer.flush(std::time::Duration::from_secs(5));
            telemetry.shutdown();
        })
        .await;
        self.server.exit().await;
    }

    /// The instance's telemetry (live statistics, Prometheus scrape).
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Upstream bodies being read on after their client left.
    pub fn drains_active(&self) -> usize {
        self.drains.active()
    }

    /// Whether the active configuration asks for the config file to be watched.
    pub fn watch_config(&self) -> bool {
        self.state.load().config.watch_config
    }

    /// Swap in a newly loaded configuration: new requests use it, requests
    /// in flight finish on the snapshot they started with, and no
    /// connection is touched. Refused, with the old configuration kept,
    /// when `loaded` failed, a restart-only key changed, or the upstream
    /// client cannot be rebuilt. Counted in `tokentap.config.reloads` and
    /// shown on `/config` either way. Call it from one task at a time (the
    /// swap is a load then a store, not a compare-and-swap).
    pub fn reload(&self, loaded: Result<Config, ConfigError>) -> Result<(), ReloadError> {
        let result = loaded
            .map_err(ReloadError::from)
            .and_then(|config| self.swap(config));
        self.telemetry.record_config_reload(result.is_ok());
        let active = self.state.load();
        match &result {
            Ok(()) => self.config_view.set(&active.config),
            Err(e) => self.config_view.failed(&active.config, &e.summary()),
        }
        result
    }

    fn swap(&self, config: Config) -> Result<(), ReloadError> {
        let current = self.state.load_full();
        if let Some(key) = current.config.restart_required(&config) {
            return Err(ReloadError::RestartRequired { key });
        }
        let client = if client_changed(&current.config.upstream, &config.upstream) {
            Client::new(&config.upstream).map_err(|e| ReloadError::Upstream(e.to_string()))?
        } else {
            current.client.clone()
        };
        // Certificates are read again on every reload (a rotated file keeps
        // its path); both listeners' files must load before either changes.
        let staged = [
            (&self.tls, config.tls.as_ref()),
            (&self.admin_tls, config.admin.tls.as_ref()),
        ]
        .into_iter()
        .filter_map(|(tls, cfg)| Some((tls.as_ref()?, cfg?)))
        .map(|(tls, cfg)| {
            Tls::prepare(cfg)
                .map(|s| (tls, s))
                .map_err(|e| ReloadError::Tls(format!("{} listener: {e}", tls.listener)))
        })
        .collect::<Result<Vec<_>, _>>()?;
        for (tls, s) in staged {
            tls.install(s);
        }
        self.state.store(Arc::new(State {
            router: Router::new(&config.routes),
            client,
            telemetry: current.telemetry.clone(),
            tokenizer: current.tokenizer.clone(),
            drains: current.drains.clone(),
            config,
        }));
        Ok(())
    }
}

/// A new pooled client is built when a setting changed, and whenever a CA
/// file is configured (a reload is how a rotated bundle is picked up).
fn client_changed(old: &UpstreamConfig, new: &UpstreamConfig) -> bool {
    new.ca_file.is_some() || format!("{old:?}") != format!("{new:?}")
}

/// Bind the listener and start serving. Must run inside a tokio runtime.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let telemetry = Arc::new(match config.admin_listen {
        Some(_) => Telemetry::init_with_prometheus(&config.telemetry)?,
        None => Telemetry::init(&config.telemetry)?,
    });
    let client = Client::new(&config.upstream)?;
    let tls = config
        .tls
        .as_ref()
        .map(|t| Tls::load("proxy", t))
        .transpose()?;
    let admin_tls = match (&config.admin_listen, &config.admin.tls) {
        (Some(_), Some(t)) => Some(Tls::load("admin", t)?),
        _ => None,
    };
    telemetry.observe_certificates(tls.iter().chain(admin_tls.iter()).cloned().collect());
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listen {}: {e}", config.listen))?;
    let addr = listener.local_addr()?;
    // After the proxy's bind, so a clash costs the admin port, not the proxy.
    let readiness = Readiness::new();
    let config_view = ConfigView::new(&config);
    let admin = admin::bind(&config).await?.map(|l| {
        let state = AdminState {
            telemetry: telemetry.clone(),
            readiness: readiness.clone(),
            config: config_view.clone(),
        };
        Admin::spawn(l, state, &config.server, admin_tls.clone(), &config.admin)
    });
    let tokenizer = Tokenizer::start(config.meter.tokenizer);
    let server_cfg = config.server.clone();
    let drains = Drains::new(config.upstream.max_drains);
    let observed = drains.clone();
    telemetry.observe_drains(move || observed.active() as u64);
    let shutdown_grace = config.server.shutdown_grace;
    let state = Arc::new(ArcSwap::from_pointee(State {
        drains: drains.clone(),
        router: Router::new(&config.routes),
        client,
        telemetry: telemetry.clone(),
        tokenizer: tokenizer.clone(),
        config,
    }));
    let (stop, stopped) = watch::channel(false);
    let snapshots = state.clone();
    // Each request takes the snapshot current when it arrives.
    let handler = move |req| handle(snapshots.load_full(), req);
    let server = Shards::start(listener, &server_cfg, tls.clone(), handler, stopped)
        .map_err(|e| anyhow::anyhow!("cannot start the serving threads: {e}"))?;
    Ok(Running {
        addr,
        admin_addr: admin.as_ref().map(|a| a.addr),
        stop,
        server,
        admin,
        readiness,
        telemetry,
        tokenizer,
        state,
        config_view,
        drains,
        shutdown_grace,
        tls,
        admin_tls,
    })
}

/// The response body served to clients.
#[derive(Debug)]
pub enum ProxyBody {
    /// An upstream body, metered on its way through.
    Metered(Box<MeteredBody<upstream::ResponseBody>>),
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

/// Records a cancelled request if dropped while the request body is read.
struct UnreadGuard<'a> {
    state: &'a State,
    route: &'a Route,
    operation: Option<Operation>,
    provider: Option<ProviderKind>,
    start: Instant,
    start_wall: SystemTime,
}

impl UnreadGuard<'_> {
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for UnreadGuard<'_> {
    fn drop(&mut self) {
        let facts = RequestFacts {
            route: self.route.name.clone(),
            provider: self.provider.unwrap_or(ProviderKind::Openai),
            operation: self.operation,
            request_model: None,
            stream: false,
            tenant: None,
            server_address: self.route.server_address.clone(),
            server_port: self.route.server_port,
            request_body: crate::meter::RequestBody::Unread,
            start_wall: self.start_wall,
            start: self.start,
        };
        let telemetry = self.state.telemetry.begin(&facts, &http::HeaderMap::new());
        // Dropping an unfinished meter records `client_cancelled`.
        drop(Meter::new(facts, Box::new(telemetry)));
    }
}

/// The request body with `stream_options.include_usage` added, when the
/// route opts in and the request is an OpenAI-format stream that did not
/// mention `stream_options` (an explicit `include_usage: false` is respected).
fn injected_body(
    route: &Route,
    provider: Option<ProviderKind>,
    operation: Option<Operation>,
    sniffed: &Sniffed,
    body: &Replay<Incoming>,
) -> Option<Bytes> {
    let eligible = route.inject_usage
        && provider == Some(ProviderKind::Openai)
        && matches!(
            operation,
            Some(Operation::ChatCompletions | Operation::Completions)
        )
        && sniffed.stream == Some(true)
        && !sniffed.has_stream_options;
    if !eligible {
        return None;
    }
    rewrite::add_include_usage(&body.whole()?)
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

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Response<ProxyBody> {
    let start = Instant::now();
    let start_wall = SystemTime::now();
    let Some(route) = state.router.find(request_host(&req), req.uri().path()) else {
        return upstream::error_response(
            StatusCode::NOT_FOUND,
            "no route matches this path",
            "no_route",
        );
    };
    let upstream_uri = match route.upstream_uri(req.uri()) {
        Ok(uri) => uri,
        Err(e) => {
            return upstream::error_response(
                StatusCode::BAD_REQUEST,
                &format!("bad request target: {e}"),
                "bad_request",
            );
        }
    };
    let (mut parts, body) = req.into_parts();
    let path = route.strip(parts.uri.path()).unwrap_or(parts.uri.path());
    let (operation, provider) = (
        Operation::from_path(path),
        route.provider.or_else(|| ProviderKind::detect(path)),
    );

    // A client that goes away while its body is still being read is
    // recorded too (as cancelled, before anything was forwarded).
    let unread = UnreadGuard {
        state: &state,
        route,
        operation,
        provider,
        start,
        start_wall,
    };
    let sniffed = sniff::sniff(&parts.headers, body, state.config.sniff.max_body_bytes).await;
    let Ok((sniffed, mut body)) = sniffed else {
        // The client's body broke off: nothing is forwarded, and the guard
        // records the request as cancelled.
        return upstream::error_response(
            StatusCode::BAD_REQUEST,
            "the request body ended early",
            "client_body_error",
        );
    };
    unread.disarm();
    let injected = injected_body(route, provider, operation, &sniffed, &body);
    if let Some(rewritten) = &injected {
        parts
            .headers
            .insert(header::CONTENT_LENGTH, rewritten.len().into());
        body = Replay::full(rewritten.clone());
    }
    let client_cert = parts.extensions.get::<ClientIdentity>().map(|c| &*c.0);
    let tenant = route::resolve_tenant_with_cert(
        &state.config.tenant,
        &parts.headers,
        sniffed.user.as_deref(),
        client_cert,
    );
    let stream = providers::request_streams(operation, sniffed.stream);
    let request_model = sniffed
        .model
        .or_else(|| providers::model_from_path(path).map(Cow::into_owned));
    let facts = RequestFacts {
        route: route.name.clone(),
        provider: provider.unwrap_or(ProviderKind::Openai),
        operation,
        request_model,
        stream,
        tenant,
        server_address: route.server_address.clone(),
        server_port: route.server_port,
        request_body: sniffed.body,
        start_wall,
        start,
    };
    let telemetry = state.telemetry.begin(&facts, &parts.headers);

    // The upstream request: same method, headers and body bytes; hop-by-hop
    // headers and Host dropped (hyper writes Host / :authority from the URI).
    let client_version = parts.version;
    upstream::strip_hop_by_hop(&mut parts.headers);
    parts.headers.remove(header::HOST);
    telemetry.inject(&mut parts.headers);
    parts.uri = upstream_uri;
    parts.version = Version::HTTP_11;
    let mut meter = Meter::new(facts, Box::new(telemetry));
    // Streams that will carry no usage get their tokens counted afterwards.
    if stream && sniffed.include_usage != Some(true) && injected.is_none() {
        let model = meter.facts().request_model.as_deref();
        if let Some(plan) = state.tokenizer.plan(model, body.whole()) {
            meter.count_tokens_with(plan);
        }
    }
    if let Some(cfg) = &route.sigv4 {
        // The client signed for tokentap's address; sign again for the upstream.
        let Some(bytes) = body.whole() else {
            let (status, code) = (StatusCode::PAYLOAD_TOO_LARGE, "sigv4_body_too_large");
            meter.fail(status.as_u16(), code);
            let message = "request body over sniff.max_body_bytes cannot be SigV4-signed";
            return upstream::error_response(status, message, code);
        };
        if let Err(e) = sigv4::sign(&mut parts, &bytes, cfg, SystemTime::now()) {
            let (status, code) = (StatusCode::INTERNAL_SERVER_ERROR, "sigv4_signing_failed");
            meter.fail(status.as_u16(), code);
            return upstream::error_response(status, &e.to_string(), code);
        }
    }

    let res = match state.client.send(Request::from_parts(parts, body)).await {
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(route = %route.name, error = %e, "upstream request failed");
            meter.fail(e.status().as_u16(), e.code());
            return e.to_response();
        }
    };

    let (mut head, body) = res.into_parts();
    let content_type = head
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let is_sse = content_type
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("text/event-stream");
    let provider = provider.or_else(|| ProviderKind::detect_response(content_type));
    let parser = match provider {
        None => Err(Unmetered::UnknownFormat(
            "no provider configured or detected from the path or content type".into(),
        )),
        Some(kind) => Parser::new(
            kind,
            operation,
            content_type,
            state.config.meter.max_frame_bytes,
        )
        .ok_or_else(|| Unmetered::UnknownFormat(format!("content-type {content_type:?}"))),
    };
    let encoding = head
        .headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok());
    let streamed = providers::is_stream_content_type(content_type);
    meter.on_head(head.status.as_u16(), streamed, parser, encoding);

    // Restore the stream the client asked for (plain SSE only; a compressed
    // body is forwarded as it came).
    let strip = injected.is_some()
        && is_sse
        && encoding.is_none_or(|e| e.trim().eq_ignore_ascii_case("identity"));
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
    if let OnClientDisconnect::Drain { timeout } = route.on_client_disconnect {
        let max_bytes = upstream_cfg.drain_max_bytes as u64;
        let limits = DrainLimits { timeout, max_bytes };
        body = body.drain_on_disconnect(state.drains.clone(), limits);
    }
    Response::from_parts(head, ProxyBody::Metered(Box::new(body)))
}
