//! Admin listener: HTTP requests on the admin address in; Prometheus metrics,
//! liveness, readiness, the effective configuration (secrets redacted) and
//! the live dashboard out. It has its own address (never the proxy's port)
//! and its own connection limit; metric collection runs here, on a blocking
//! thread, never on the proxy's request path. Optionally served over TLS
//! (with required client certificates) and behind a bearer token; the
//! probes can stay open for load balancers.

mod compare;
mod dashboard;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{AdminConfig, Config, ServerConfig};
use crate::error::error_response;
use crate::meter::ws_sessions::WsSessions;
use crate::server;
use crate::server::tls::Tls;
use crate::ship::prometheus::Format;
use crate::telemetry::Telemetry;

/// Admin connections served at once (scrapers, probes, a few browsers).
const MAX_CONNECTIONS: usize = 64;
/// How long open admin connections may finish after the proxy has drained.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
const TEXT: &str = "text/plain; charset=utf-8";

/// The admin listener could not start.
#[derive(Debug, thiserror::Error)]
/// Displays the address only: the OS error is its source, so `{:#}`
/// shows it once.
#[error("admin listen {addr}")]
pub struct AdminError {
    /// Address the admin listener tried to bind.
    pub addr: SocketAddr,
    /// Why binding it failed.
    #[source]
    pub source: std::io::Error,
}

/// Whether the proxy takes new work: true from start until
/// `Running::shutdown` begins the drain, then false for good. `/readyz`
/// reports it, so load balancers stop routing here while in-flight streams
/// finish.
#[derive(Debug, Clone)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Ready.
    pub fn new() -> Readiness {
        Readiness(Arc::new(AtomicBool::new(true)))
    }

    /// Not ready any more (draining). Irreversible.
    pub fn set_draining(&self) {
        self.0.store(false, Ordering::Release);
    }

    /// Whether `/readyz` answers ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new()
    }
}

/// `/config`'s text: the active configuration (`Config::redacted_toml`),
/// replaced by each successful reload; a failed reload adds a comment
/// saying why, above the configuration that is still serving.
#[derive(Debug, Clone)]
pub struct ConfigView(Arc<ArcSwap<String>>);

impl ConfigView {
    /// Show `config`.
    pub fn new(config: &Config) -> ConfigView {
        ConfigView(Arc::new(ArcSwap::from_pointee(config.redacted_toml())))
    }

    /// A reload succeeded: show `config`.
    pub fn set(&self, config: &Config) {
        self.0.store(Arc::new(config.redacted_toml()));
    }

    /// A reload failed: keep `active` and say why above it. `reason` must
    /// hold no values (it is shown to anyone who can reach the admin port).
    pub fn failed(&self, active: &Config, reason: &str) {
        let reason = reason.replace('\n', " ");
        let text = format!(
            "# the last reload failed: {reason}\n# the configuration below is still active\n\n{}",
            active.redacted_toml()
        );
        self.0.store(Arc::new(text));
    }

    /// The text `/config` serves now.
    pub fn text(&self) -> Arc<String> {
        self.0.load_full()
    }
}

/// What the admin endpoints read; built once by `app::start`.
#[derive(Debug, Clone)]
pub struct AdminState {
    /// Metrics (`/metrics`) and whatever the dashboard reads.
    pub telemetry: Arc<Telemetry>,
    /// Readiness flag `/readyz` reports.
    pub readiness: Readiness,
    /// `/config`: the active configuration, secrets redacted.
    pub config: ConfigView,
    /// WebSocket sessions relayed now (`/readyz`, the dashboard).
    pub ws_sessions: Arc<WsSessions>,
}

/// A running admin listener.
#[derive(Debug)]
pub struct Admin {
    /// The bound address (useful when configured with port 0).
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Bind `config.admin_listen`. `Ok(None)` when admin is off, or when the
/// built-in default address is taken (logged: the proxy still runs); a
/// configured address that cannot be bound is an error.
pub async fn bind(config: &Config) -> Result<Option<TcpListener>, AdminError> {
    let Some(addr) = config.admin_listen else {
        return Ok(None);
    };
    match TcpListener::bind(addr).await {
        Ok(listener) => Ok(Some(listener)),
        Err(source) if config.admin_listen_default => {
            tracing::warn!(
                %addr,
                error = %source,
                "admin listener off: its default address is unavailable; \
                 set admin_listen (--admin-listen) to another address, or to \"off\""
            );
            Ok(None)
        }
        Err(source) => Err(AdminError { addr, source }),
    }
}

impl Admin {
    /// Serve the admin endpoints on `listener` (over `tls` when set, behind
    /// `access.token` when set) until `shutdown`.
    pub fn spawn(
        listener: TcpListener,
        state: AdminState,
        proxy: &ServerConfig,
        tls: Option<Arc<Tls>>,
        access: &AdminConfig,
    ) -> Admin {
        let addr = listener.local_addr().unwrap_or_else(|_| {
            // Unreachable for a bound TCP listener; keep a usable value.
            SocketAddr::from(([127, 0, 0, 1], 0))
        });
        // The proxy's head limits and timeouts; its own connection cap and grace.
        let cfg = ServerConfig {
            max_connections: MAX_CONNECTIONS,
            shutdown_grace: SHUTDOWN_GRACE,
            threads: 1,
            ..proxy.clone()
        };
        let (stop, stopped) = watch::channel(false);
        let state = Arc::new(state);
        let guard = Arc::new(Guard {
            token: access.token.clone(),
            open_probes: access.open_probes,
        });
        let handler = move |req: Request<hyper::body::Incoming>| {
            let refused = guard.check(&req);
            let state = state.clone();
            async move {
                match refused {
                    Some(res) => res,
                    None => handle(state, req).await,
                }
            }
        };
        let task = tokio::spawn(server::serve(listener, cfg, tls, handler, stopped));
        Admin { addr, stop, task }
    }

    /// Stop accepting and close open admin connections (bounded).
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// Who may use the admin endpoints (client certificates are checked in
/// the TLS handshake, before this).
#[derive(Debug)]
struct Guard {
    token: Option<String>,
    open_probes: bool,
}

/// The cookie the dashboard's login (`/?token=...`) sets, so the page's own
/// requests carry the token without it showing in later URLs.
const COOKIE: &str = "tokentap_admin";

impl Guard {
    /// `None` when `req` may pass; the refusal otherwise.
    fn check<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        let token = self.token.as_deref()?;
        let path = req.uri().path();
        if self.open_probes && matches!(path, "/healthz" | "/readyz") {
            return None;
        }
        let bearer = req
            .headers()
            .get_all(header::AUTHORIZATION)
            .iter()
            .filter_map(|v| {
                let b = v.as_bytes();
                b.get(..7)
                    .filter(|p| p.eq_ignore_ascii_case(b"bearer "))
                    .map(|_| &b[7..])
            });
        let cookie = req
            .headers()
            .get_all(header::COOKIE)
            .iter()
            .flat_map(|v| v.as_bytes().split(|b| *b == b';'))
            .filter_map(|c| {
                c.trim_ascii()
                    .strip_prefix(COOKIE.as_bytes())?
                    .strip_prefix(b"=")
            });
        if bearer
            .chain(cookie)
            .any(|t| same(t.trim_ascii(), token.as_bytes()))
        {
            return None;
        }
        // The dashboard in a browser: `/?token=...` once sets the cookie
        // and redirects to `/`, so the token leaves the address bar.
        if path == "/" {
            let given = req
                .uri()
                .query()
                .into_iter()
                .flat_map(|q| q.split('&'))
                .find_map(|kv| kv.strip_prefix("token="));
            if given.is_some_and(|t| same(t.as_bytes(), token.as_bytes())) {
                let mut res = respond(StatusCode::SEE_OTHER, TEXT, "");
                res.headers_mut()
                    .insert(header::LOCATION, HeaderValue::from_static("/"));
                if let Ok(v) = HeaderValue::from_str(&format!(
                    "{COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/"
                )) {
                    res.headers_mut().insert(header::SET_COOKIE, v);
                }
                return Some(res);
            }
        }
        let mut res = error_response(
            StatusCode::UNAUTHORIZED,
            "the admin listener needs `authorization: Bearer <admin.token>` \
             (in a browser: open /?token=<admin.token> once)",
            "unauthorized",
        );
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"tokentap admin\""),
        );
        Some(res)
    }
}

/// Constant-time equality (the comparison must not reveal how much of a
/// guessed token was right).
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Route one admin request.
pub async fn handle<B>(state: Arc<AdminState>, req: Request<B>) -> Response<Full<Bytes>> {
    let path = req.uri().path();
    let known = matches!(
        path,
        "/metrics"
            | "/healthz"
            | "/readyz"
            | "/config"
            | "/"
            | "/api/live"
            | "/api/sessions"
            | "/api/compare"
    );
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return if known {
            method_not_allowed()
        } else {
            not_found(path)
        };
    }
    match path {
        "/metrics" => metrics(&state, req.headers()).await,
        "/healthz" => respond(StatusCode::OK, TEXT, "ok\n"),
        "/readyz" if state.readiness.is_ready() => {
            // The first line stays `ready` for probes that match the body.
            let body = format!(
                "ready\nwebsocket_sessions: {}\n",
                state.ws_sessions.active()
            );
            respond(StatusCode::OK, TEXT, body)
        }
        "/readyz" => respond(StatusCode::SERVICE_UNAVAILABLE, TEXT, draining(&state)),
        "/config" => respond(
            StatusCode::OK,
            TEXT,
            Bytes::from(state.config.text().as_bytes().to_vec()),
        ),
        "/" => dashboard::page(),
        "/api/live" => dashboard::live(&state),
        "/api/sessions" => dashboard::sessions(&state, req.uri().query()).await,
        "/api/compare" => compare::answer(&state, req.uri().query()),
        _ => not_found(path),
    }
}

async fn metrics(state: &AdminState, headers: &HeaderMap) -> Response<Full<Bytes>> {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    let gzip = accepts_gzip(headers);
    let telemetry = state.telemetry.clone();
    // Collection is synchronous and takes the SDK's aggregation locks
    // briefly; keep it off the async workers that also serve the proxy.
    // Compressing is CPU too, so it happens there as well.
    let scrape = move || {
        let text = telemetry.scrape(format)?;
        Ok::<_, crate::telemetry::TelemetryError>(match gzip {
            true => gzipped(text.as_bytes()).map_or((Bytes::from(text), false), |z| (z, true)),
            false => (Bytes::from(text), false),
        })
    };
    match tokio::task::spawn_blocking(scrape).await {
        Ok(Ok((body, zipped))) => {
            let mut res = respond(StatusCode::OK, format.content_type(), body);
            let h = res.headers_mut();
            h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            if zipped {
                h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            }
            res
        }
        Ok(Err(e)) => error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &e.to_string(),
            "metrics_unavailable",
        ),
        Err(e) => error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("metric collection failed: {e}"),
            "metrics_unavailable",
        ),
    }
}

/// The client takes gzip (`Accept-Encoding: gzip`, as Prometheus sends):
/// a scrape is label-heavy text that shrinks about 60-fold.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip"))
                && !refused
        })
}

/// `body` gzip-compressed (fast level: a scrape is cheap to squeeze);
/// `None` if the encoder fails, and the scrape goes out plain.
fn gzipped(body: &[u8]) -> Option<Bytes> {
    use std::io::Write as _;
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(body.len() / 16),
        flate2::Compression::fast(),
    );
    z.write_all(body).ok()?;
    z.finish().ok().map(Bytes::from)
}

/// A response with a body and its content type; for the dashboard too.
pub fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = status;
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Admin answers describe this moment; caches must not keep them.
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

fn not_found(path: &str) -> Response<Full<Bytes>> {
    // The path came from the peer: quote it, cap it.
    let shown: String = path.chars().take(200).collect();
    error_response(
        StatusCode::NOT_FOUND,
        &format!("no admin endpoint at {shown:?}; see /"),
        "not_found",
    )
}

fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut res = error_response(
        StatusCode::METHOD_NOT_ALLOWED,
        "admin endpoints accept GET and HEAD",
        "method_not_allowed",
    );
    res.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    res
}

/// `/readyz` while draining: the streams the drain still waits for
/// (HTTP requests and WebSocket sessions), the oldest one's age, and the
/// WebSocket sessions among them.
fn draining(state: &AdminState) -> String {
    let open = state.ws_sessions.shutdown().open();
    let oldest = open
        .oldest
        .map(|age| format!("oldest_stream_age: {}\n", humantime::format_duration(age)))
        .unwrap_or_default();
    format!(
        "draining\nstreams: {}\n{oldest}websocket_sessions: {}\n",
        open.streams,
        state.ws_sessions.active()
    )
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::meter::shutdown::Shutdown;

    fn state() -> Arc<AdminState> {
        let config = crate::config::from_toml(
            "[tenant]\nsalt = \"pepper\"\n[telemetry]\notlp_enabled = false\n\
             [telemetry.otlp_headers]\nauthorization = \"Bearer s3cret\"\n\
             [[routes]]\nname = \"a\"\nprefix = \"/\"\nupstream = \"http://127.0.0.1:9\"\n",
        )
        .expect("test config");
        let telemetry = Telemetry::init_with_prometheus(&config.telemetry).expect("telemetry");
        Arc::new(AdminState {
            telemetry: Arc::new(telemetry),
            readiness: Readiness::new(),
            config: ConfigView::new(&config),
            ws_sessions: WsSessions::new(Shutdown::new()),
        })
    }

    async fn get(state: &Arc<AdminState>, method: Method, path: &str) -> (StatusCode, String) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .expect("request");
        let res = handle(state.clone(), req).await;
        let status = res.status();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn admin_routes_answer() {
        let s = state();
        assert_eq!(
            get(&s, Method::GET, "/healthz").await,
            (StatusCode::OK, "ok\n".into())
        );
        assert_eq!(
            get(&s, Method::GET, "/readyz").await,
            (StatusCode::OK, "ready\nwebsocket_sessions: 0\n".into())
        );
        s.readiness.set_draining();
        assert_eq!(
            get(&s, Method::GET, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "draining\nstreams: 0\nwebsocket_sessions: 0\n".into()
            ),
            "/readyz is 503 once draining"
        );
        #[allow(clippy::disallowed_methods, reason = "test clock")]
        let open = s.ws_sessions.shutdown().enter(std::time::Instant::now());
        assert_eq!(
            get(&s, Method::GET, "/readyz").await.1,
            "draining\nstreams: 1\noldest_stream_age: 0s\nwebsocket_sessions: 0\n",
            "/readyz counts the streams left"
        );
        drop(open);
        assert_eq!(
            get(&s, Method::GET, "/healthz").await.0,
            StatusCode::OK,
            "/healthz stays 200 while draining"
        );

        let (status, config) = get(&s, Method::GET, "/config").await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            !config.contains("pepper") && !config.contains("s3cret"),
            "/config leaked a secret:\n{config}"
        );
        assert!(config.contains("<redacted>"), "{config}");

        let (status, body) = get(&s, Method::GET, "/nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        let json: serde_json::Value = serde_json::from_str(&body).expect("404 body is JSON");
        assert_eq!(json["error"]["code"], "not_found", "{json}");

        assert_eq!(
            get(&s, Method::POST, "/metrics").await.0,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(get(&s, Method::POST, "/x").await.0, StatusCode::NOT_FOUND);
        s.telemetry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn config_shows_the_active_config_and_a_failed_reload() {
        let s = state();
        let before = get(&s, Method::GET, "/config").await.1;
        let active = crate::config::from_toml(&before).expect("/config reads back");
        s.config.failed(
            &active,
            "invalid `routes[0].upstream` (from file /x.toml)\nsecond",
        );
        let (_, shown) = get(&s, Method::GET, "/config").await;
        assert!(
            shown.starts_with(
                "# the last reload failed: invalid `routes[0].upstream` (from file /x.toml) second\n"
            ),
            "the reason is one comment line:\n{shown}"
        );
        crate::config::from_toml(&shown).expect("still valid TOML that reads back");
        s.config.set(&active);
        assert_eq!(get(&s, Method::GET, "/config").await.1, before);
        s.telemetry.shutdown();
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn metrics_negotiates_the_format() {
        let s = state();
        let req = |accept: &str| {
            Request::builder()
                .uri("/metrics")
                .header(header::ACCEPT, accept)
                .body(())
                .expect("request")
        };
        let res = handle(s.clone(), req("application/openmetrics-text;version=1.0.0")).await;
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            Format::OpenMetrics.content_type()
        );
        let body = res.into_body().collect().await.expect("body").to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(text.contains("target_info{"), "{text}");

        let res = handle(s.clone(), req("text/plain")).await;
        assert_eq!(
            res.headers()[header::CONTENT_TYPE],
            Format::Text.content_type()
        );

        s.telemetry.shutdown();
        let res = handle(s.clone(), req("text/plain")).await;
        assert_eq!(
            res.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "no metrics after telemetry shutdown"
        );
    }
}
