//! Configuration: figment layers (defaults < `OTEL_*` env < TOML file <
//! `TOKENTAP_*` env < CLI flags) in, a validated `Config` out. Figment stays
//! inside this module; see `docs/CONFIG.md` for every key.
//!
//! Each section struct below is at once the file's shape, its defaults
//! (`impl Default`), the typed value the proxy reads and what `/config`
//! shows: per-field parsing and bounds are serde helpers (`units`), secrets
//! are marked on the field. `validate` only adds checks across keys; see
//! CONTRIBUTING.md, "Add a config key".

pub mod compare;
mod layers;
mod parse;
pub mod proxy;
mod raw;
mod restart;
pub mod sigv4;
pub mod state;
mod units;
mod validate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::Figment;
use figment::providers::{Format, Toml};
use serde::{Deserialize, Serialize};

use crate::labels::RouteLabels;
use crate::pricing::PriceOverride;
use crate::providers::ProviderKind;

pub use self::compare::CompareConfig;
pub use self::restart::RESTART_ONLY;
pub use self::state::StateConfig;

/// The validated configuration the rest of tokentap runs on.
#[derive(Debug, Clone)]
pub struct Config {
    /// Proxy listen address.
    pub listen: SocketAddr,
    /// Admin listener (metrics, health, readiness, config, dashboard);
    /// `None` = off (`admin_listen = "off"`).
    pub admin_listen: Option<SocketAddr>,
    /// `admin_listen` is the built-in default, not configured: when that
    /// port is taken, tokentap warns and runs without the admin listener
    /// instead of refusing to start.
    pub admin_listen_default: bool,
    /// Poll the config file and reload when its content changes
    /// (`--watch-config`); SIGHUP reloads either way.
    pub watch_config: bool,
    /// Listener settings (`[server]`).
    pub server: ServerConfig,
    /// TLS on the proxy listener (`[tls]`); `None` = plaintext.
    pub tls: Option<TlsConfig>,
    /// Protection of the admin listener (`[admin]`).
    pub admin: AdminConfig,
    /// Upstream client settings (`[upstream]`).
    pub upstream: UpstreamConfig,
    /// Routes, in match order.
    pub routes: Vec<RouteConfig>,
    /// Request body sniffing settings (`[sniff]`).
    pub sniff: SniffConfig,
    /// Response metering settings (`[meter]`).
    pub meter: MeterConfig,
    /// WebSocket relay settings (`[websocket]`).
    pub websocket: WebsocketConfig,
    /// Tenant attribution settings (`[tenant]`).
    pub tenant: TenantConfig,
    /// Agent session ids and their rollups (`[sessions]`).
    pub sessions: SessionsConfig,
    /// Export and telemetry settings (`[telemetry]`).
    pub telemetry: TelemetryConfig,
    /// The shared state store or the state file (`[state]`).
    pub state: StateConfig,
    /// Price overrides for every route (`[[prices]]`), first match wins.
    pub prices: Vec<PriceOverride>,
    /// A file of `[[prices]]` entries (`--prices`), read at start-up and on
    /// every reload; checked after the config file's entries.
    pub prices_file: Option<PathBuf>,
    /// The egress proxy variables (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
    /// `NO_PROXY`) of the environment the configuration was loaded from.
    pub proxy_env: proxy::ProxyEnv,
}

/// `[server]`: listener limits and shutdown (restart-only: see [`RESTART_ONLY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Time allowed for a client to send a complete request head.
    #[serde(with = "units::positive")]
    pub header_read_timeout: Duration,
    /// Largest request head accepted (size).
    #[serde(with = "units::size")]
    pub max_header_bytes: usize,
    /// Most header fields a request may carry.
    pub max_headers: usize,
    /// Connections served at once; more wait in the accept queue.
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_connections: usize,
    /// On SIGTERM/SIGINT, how long in-flight requests may run before they are cut.
    #[serde(with = "units::duration")]
    pub shutdown_grace: Duration,
    /// Serving threads, each with a single-threaded runtime (0 = one per CPU).
    pub threads: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            header_read_timeout: Duration::from_secs(10),
            max_header_bytes: 64 << 10,
            max_headers: 100,
            max_connections: 10_000,
            shutdown_grace: Duration::from_secs(600),
            threads: 0,
        }
    }
}

/// `[tls]` / `[admin.tls]`: TLS on a listener; the files are read at
/// start-up and again on every reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Certificate chain file (PEM), leaf first.
    pub cert: PathBuf,
    /// The leaf's private key file (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// `[[tls.sni]]`: further certificates, chosen by the server name (SNI).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<SniCert>,
    /// CA bundle (PEM) client certificates are verified against (mTLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<PathBuf>,
    /// `required` (the default with `client_ca`) or `optional`.
    #[serde(default, skip_serializing_if = "ClientAuth::is_off")]
    pub client_auth: ClientAuth,
}

/// One `[[tls.sni]]` entry: the certificate served for `name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SniCert {
    /// Server name (one exact DNS name, lowercase).
    pub name: String,
    /// Certificate chain file (PEM).
    pub cert: PathBuf,
    /// Private key file (PEM).
    pub key: PathBuf,
}

/// Client certificates on a TLS listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientAuth {
    /// None asked for (no `client_ca`).
    #[default]
    Off,
    /// Asked for; a client without one is served, one with a bad one is refused.
    Optional,
    /// Required: a client without a valid certificate fails the handshake.
    Required,
}

impl ClientAuth {
    fn is_off(&self) -> bool {
        *self == ClientAuth::Off
    }
}

/// `[admin]`: who may use the admin listener (restart-only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer token required on every admin request except open probes (secret).
    #[serde(
        serialize_with = "units::secret",
        skip_serializing_if = "Option::is_none"
    )]
    pub token: Option<String>,
    /// File holding the bearer token (a mounted Secret); read at load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
    /// `/healthz` and `/readyz` answer without the token (not without mTLS).
    pub open_probes: bool,
    /// Start with an unprotected admin listener on a non-loopback address.
    pub allow_unprotected: bool,
    /// `[admin.tls]`: TLS (and optional mTLS) on the admin listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            token: None,
            token_file: None,
            open_probes: true,
            allow_unprotected: false,
            tls: None,
        }
    }
}

impl AdminConfig {
    /// Whether a bearer token or required client certificates guard the admin endpoints.
    pub fn protected(&self) -> bool {
        self.token.is_some()
            || self
                .tls
                .as_ref()
                .is_some_and(|t| t.client_auth == ClientAuth::Required)
    }
}

/// `[upstream]`: the upstream client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// Time allowed to open a TCP (and TLS) connection to the upstream.
    #[serde(with = "units::positive")]
    pub connect_timeout: Duration,
    /// Abort when the upstream sends nothing for this long (none by default).
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
    /// Abort any request that runs longer than this (none by default).
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub total_timeout: Option<Duration>,
    /// Extra PEM CA bundle trusted beside the webpki roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// How long an idle pooled connection is kept.
    #[serde(with = "units::duration")]
    pub pool_idle_timeout: Duration,
    /// Idle pooled connections kept per upstream host.
    pub pool_max_idle_per_host: usize,
    /// Extra attempts when opening a connection (TCP or TLS) fails; 0 = none.
    /// Nothing of the request has been sent then, so a retry is safe.
    pub connect_retries: u32,
    /// Wait before the first connect retry; doubles for each further one.
    #[serde(with = "units::positive")]
    pub connect_retry_backoff: Duration,
    /// Default bound on reading an upstream body on after its client left
    /// (routes with `on_client_disconnect = "drain"`).
    #[serde(with = "units::positive")]
    pub drain_timeout: Duration,
    /// Most body bytes one drain reads before it gives up (size).
    #[serde(with = "units::size")]
    pub drain_max_bytes: usize,
    /// Drains running at once; past this, a disconnect cancels (restart-only).
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_drains: usize,
    /// HTTP/2 connections per upstream host (and serving thread); when all
    /// are at their stream limit, requests queue.
    #[serde(deserialize_with = "units::at_least_one")]
    pub http2_max_connections_per_host: usize,
    /// Most streams tokentap puts on one HTTP/2 connection (the server's
    /// SETTINGS_MAX_CONCURRENT_STREAMS applies too, whichever is lower).
    pub http2_max_streams_per_connection: u32,
    /// Longest wait for an HTTP/2 stream slot past the connection cap; then 503.
    #[serde(with = "units::positive")]
    pub http2_queue_timeout: Duration,
    /// HTTP/2 receive window per stream (size, 16KiB to 2GiB - 1): what the
    /// upstream may send ahead of a client that does not read.
    #[serde(with = "units::size")]
    pub http2_stream_window: usize,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            connect_timeout: Duration::from_secs(5),
            idle_timeout: None,
            total_timeout: None,
            ca_file: None,
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 64,
            connect_retries: 0,
            connect_retry_backoff: Duration::from_millis(100),
            drain_timeout: Duration::from_secs(30),
            drain_max_bytes: 16 << 20,
            max_drains: 256,
            http2_max_connections_per_host: 16,
            http2_max_streams_per_connection: 100,
            http2_queue_timeout: Duration::from_secs(10),
            http2_stream_window: 256 << 10,
        }
    }
}

/// One `[[routes]]` entry: requests matching `prefix` (and `host`, when
/// set) go to `upstream`. At once the file's shape (each field parsed and
/// checked by its serde helper), the typed value the router keeps
/// (`route::Route` derefs to it) and what `/config` shows (secrets
/// redacted by `serialize_with`); `validate::routes` adds the checks
/// across keys and routes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Route name, used as the `tokentap.route` label.
    pub name: String,
    /// Path prefix, e.g. `/openai`; `/` matches everything; trailing `/`
    /// dropped. Stripped before forwarding.
    #[serde(default = "root_prefix", deserialize_with = "units::prefix")]
    pub prefix: String,
    /// Match only this `Host` (without port), case-insensitive (stored lowercase).
    #[serde(
        default,
        deserialize_with = "units::host",
        skip_serializing_if = "Option::is_none"
    )]
    pub host: Option<String>,
    /// Upstream base URL: scheme, authority and an optional base path.
    #[serde(with = "units::upstream")]
    pub upstream: http::Uri,
    /// API family; `None` = detect from the request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// Ask OpenAI-format streams for usage (`stream_options.include_usage`)
    /// when the client did not, and remove the extra usage from what the
    /// client receives.
    #[serde(default)]
    pub inject_usage: bool,
    /// `[routes.sigv4]`: re-sign forwarded requests with AWS SigV4 (Bedrock
    /// behind tokentap); credentials default to the `AWS_*` environment.
    /// `/config` shows region, service and key id only.
    #[serde(
        default,
        with = "units::sigv4",
        skip_serializing_if = "Option::is_none"
    )]
    pub sigv4: Option<std::sync::Arc<sigv4::SigV4Config>>,
    /// `cancel` (default) or `drain`: what happens to the upstream request
    /// when the client goes away mid-stream (see [`RouteConfig::disconnect`]).
    #[serde(default, skip_serializing_if = "is_cancel")]
    pub on_client_disconnect: DisconnectMode,
    /// Drain bound for this route; unset = `upstream.drain_timeout`.
    #[serde(
        with = "units::opt_positive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub drain_timeout: Option<Duration>,
    /// Upstream protocol: HTTP/2 when ALPN picks it, always, or never.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub http2: Http2Mode,
    /// Egress proxy for this route's upstream: as the environment says
    /// (unset), none (`"none"`), or a given one; the password is redacted
    /// in `/config`.
    #[serde(
        default,
        with = "units::route_proxy",
        skip_serializing_if = "proxy::RouteProxy::is_env"
    )]
    pub proxy: proxy::RouteProxy,
    /// Price overrides for this route's requests (`[[routes.prices]]`),
    /// checked before the global ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prices: Vec<PriceOverride>,
    /// Operator labels (`routes[].labels`), e.g. `{ hardware = "H100" }`:
    /// span attributes `tokentap.route.label.<key>`, never metric labels.
    #[serde(default, skip_serializing_if = "RouteLabels::is_empty")]
    pub labels: RouteLabels,
}

fn root_prefix() -> String {
    "/".into()
}

fn is_auto(m: &Http2Mode) -> bool {
    *m == Http2Mode::Auto
}

fn is_cancel(m: &DisconnectMode) -> bool {
    *m == DisconnectMode::Cancel
}

impl RouteConfig {
    /// The upstream as the docs write it: a bare host without the trailing
    /// `/` that a URI's empty path prints as.
    pub fn upstream_shown(&self) -> String {
        units::upstream::shown(&self.upstream)
    }

    /// What happens to the upstream request when the client goes away:
    /// `drain` takes the route's `drain_timeout`, else `default_timeout`
    /// (`upstream.drain_timeout`).
    pub fn disconnect(&self, default_timeout: Duration) -> OnClientDisconnect {
        match self.on_client_disconnect {
            DisconnectMode::Cancel => OnClientDisconnect::Cancel,
            DisconnectMode::Drain => OnClientDisconnect::Drain {
                timeout: self.drain_timeout.unwrap_or(default_timeout),
            },
        }
    }
}

/// `routes[].http2`: which HTTP version the route speaks to its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Http2Mode {
    /// HTTP/2 when the upstream's TLS ALPN picks it, else HTTP/1.1
    /// (plain `http://` upstreams: HTTP/1.1).
    #[default]
    Auto,
    /// HTTP/2 only: ALPN offers only `h2`; `http://` upstreams get h2c
    /// with prior knowledge.
    Always,
    /// HTTP/1.1 only: ALPN offers only `http/1.1`.
    Never,
}

/// What a route does with the upstream request when its client goes away
/// after the response head (before it, the upstream request is always cancelled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnClientDisconnect {
    /// Cancel the upstream request at once (close the connection / reset the stream).
    Cancel,
    /// Keep reading the upstream body in the background, for at most
    /// `timeout` (and `upstream.drain_max_bytes`), to meter the final usage.
    Drain {
        /// Longest time to keep reading after the client left.
        timeout: Duration,
    },
}

/// `on_client_disconnect` as written in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DisconnectMode {
    /// Cancel the upstream request (the default).
    #[default]
    Cancel,
    /// Read the upstream body on, bounded, for billing accuracy.
    Drain,
}

/// `[sniff]`: request body sniffing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SniffConfig {
    /// Request bodies up to this size are read to find `model` and `stream`.
    #[serde(with = "units::size")]
    pub max_body_bytes: usize,
}

impl Default for SniffConfig {
    fn default() -> Self {
        SniffConfig {
            max_body_bytes: 8 << 20,
        }
    }
}

/// `[meter]`: response metering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MeterConfig {
    /// Largest single frame (SSE event or JSON body) the parser holds.
    #[serde(with = "units::size")]
    pub max_frame_bytes: usize,
    /// Count tokens with the model family's tokenizer (OpenAI encodings,
    /// off the request path) when a stream carries no usage (restart-only).
    pub tokenizer: bool,
    /// Response ids (stored and background responses) remembered so that
    /// each one's usage is counted once however often it is streamed,
    /// resumed or polled; past it the oldest are forgotten (restart-only).
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_counted_ids: usize,
}

impl Default for MeterConfig {
    fn default() -> Self {
        MeterConfig {
            max_frame_bytes: 4 << 20,
            tokenizer: true,
            max_counted_ids: 100_000,
        }
    }
}

/// `[websocket]`: WebSocket sessions (upgrades relayed end to end). A
/// session keeps the values it started with across reloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebsocketConfig {
    /// Sessions relayed at once; an upgrade beyond it is answered 503.
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_sessions: usize,
    /// Close a session after this long without a byte either way; unset = never.
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Duration>,
    /// Largest message the session's metering reads; larger ones pass unread.
    #[serde(with = "units::size")]
    pub max_message_bytes: usize,
}

impl Default for WebsocketConfig {
    fn default() -> Self {
        WebsocketConfig {
            max_sessions: 1024,
            idle_timeout: None,
            max_message_bytes: 16 << 20,
        }
    }
}

/// Where a request's tenant comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantSource {
    /// The configured header.
    Header,
    /// The body's end-user field (OpenAI `user`, Anthropic `metadata.user_id`).
    Body,
    /// A salted hash prefix of the API key.
    ApiKey,
    /// The verified client certificate's subject common name (mTLS listeners).
    ClientCert,
}

/// `[tenant]`: tenant resolution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantConfig {
    /// Sources tried in order; the first that yields a value wins.
    #[serde(with = "units::sources")]
    pub sources: Vec<TenantSource>,
    /// Header for `TenantSource::Header`, lowercase.
    #[serde(with = "units::header")]
    pub header: http::HeaderName,
    /// Salt for API-key hashes; must be the same on every replica (secret).
    #[serde(serialize_with = "units::secret", deserialize_with = "units::salt")]
    pub salt: String,
}

impl Default for TenantConfig {
    fn default() -> Self {
        TenantConfig {
            sources: vec![
                TenantSource::Header,
                TenantSource::Body,
                TenantSource::ApiKey,
            ],
            header: http::HeaderName::from_static("x-tenant-id"),
            salt: "tokentap".into(),
        }
    }
}

/// Where a request's agent session id comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    /// The configured header (`sessions.header`).
    Header,
    /// The configured JSON body field (`sessions.body_field`).
    Body,
    /// The headers coding agents send: `x-claude-code-session-id`,
    /// `session_id`, `conversation_id`, `x-session-affinity`,
    /// `x-litellm-session-id`, in that order.
    Agents,
}

/// A JSON body field named by its path of object keys
/// (`metadata.session_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyField(Vec<String>);

impl BodyField {
    /// The field `dotted` names: object keys separated by `.`, none empty.
    pub fn parse(dotted: &str) -> Result<BodyField, String> {
        let keys: Vec<String> = dotted.split('.').map(str::to_owned).collect();
        if dotted.is_empty() || keys.iter().any(|k| k.trim().is_empty() || k.trim() != k) {
            return Err(format!(
                "`{dotted}` is not a dotted path of JSON object keys, like `metadata.session_id`"
            ));
        }
        Ok(BodyField(keys))
    }

    /// The object keys, outermost first.
    pub fn keys(&self) -> &[String] {
        &self.0
    }
}

impl std::fmt::Display for BodyField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// `[sessions]`: which request belongs to which agent session
/// (`gen_ai.conversation.id` on spans, never a metric label) and the
/// bounded per-session rollups `/api/sessions` serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Sources tried in order; the first that yields a valid id wins
    /// (empty = no sessions).
    #[serde(with = "units::sources")]
    pub sources: Vec<SessionSource>,
    /// Header for `SessionSource::Header`, lowercase.
    #[serde(with = "units::header")]
    pub header: http::HeaderName,
    /// JSON body field for `SessionSource::Body` (a string value).
    #[serde(with = "units::body_field")]
    pub body_field: BodyField,
    /// Longest id kept as is (bytes, 16 to 1024); longer ones are
    /// shortened deterministically (docs/CONFIG.md).
    #[serde(deserialize_with = "units::session_id_length")]
    pub max_id_length: usize,
    /// Sessions whose rollups are kept (1 to 10,000,000); the least
    /// recently seen goes first (restart-only).
    #[serde(deserialize_with = "units::session_count")]
    pub max_sessions: usize,
    /// A session not seen for this long is forgotten (restart-only).
    #[serde(with = "units::positive")]
    pub idle_timeout: Duration,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            sources: vec![SessionSource::Agents],
            header: http::HeaderName::from_static("x-session-id"),
            body_field: BodyField(vec!["metadata".into(), "session_id".into()]),
            max_id_length: 128,
            max_sessions: 10_000,
            idle_timeout: Duration::from_secs(24 * 3600),
        }
    }
}

impl SessionsConfig {
    /// The rollup bounds, which telemetry reads once at start-up.
    pub fn limits(&self) -> SessionLimits {
        SessionLimits {
            max_sessions: self.max_sessions,
            idle_timeout: self.idle_timeout,
        }
    }
}

/// The bounds of the per-agent-session rollups (`[sessions]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// Sessions kept; the least recently seen goes first.
    pub max_sessions: usize,
    /// A session not seen for this long is forgotten.
    pub idle_timeout: Duration,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionsConfig::default().limits()
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OtlpProtocol {
    /// OTLP over gRPC (usually port 4317).
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP over HTTP with protobuf bodies (usually port 4318).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The name as written in config and `OTEL_EXPORTER_OTLP_PROTOCOL`.
    pub fn as_str(self) -> &'static str {
        match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        }
    }
}

/// Which generation of GenAI metric names telemetry emits
/// (`telemetry.semconv`; docs/METRICS.md, "Semantic conventions version").
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Semconv {
    /// The current names (`gen_ai.client.inference.*`, the usage counters).
    Latest,
    /// The semantic-conventions v1.41.0 names (`gen_ai.client.operation.*`,
    /// `gen_ai.client.token.usage`) and `tokentap.tokens`,
    /// `tokentap.token.modality.usage`, for queries not yet moved.
    Legacy,
    /// Both sets at once, to move dashboards and alerts over.
    Both,
}

impl Semconv {
    /// Whether the current names are emitted.
    pub fn latest(self) -> bool {
        matches!(self, Semconv::Latest | Semconv::Both)
    }

    /// Whether the v1.41.0 names are emitted.
    pub fn legacy(self) -> bool {
        matches!(self, Semconv::Legacy | Semconv::Both)
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `[telemetry]`: export and cardinality (restart-only: see [`RESTART_ONLY`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP export on/off; unset = on exactly when an endpoint is configured
    /// (validation sets it to `true` then; it stays unset with no endpoint).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_enabled: Option<bool>,
    /// CA bundle (PEM) the collector's certificate is verified against
    /// (`OTEL_EXPORTER_OTLP_CERTIFICATE`); unset = the webpki roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_certificate: Option<PathBuf>,
    /// Client certificate chain (PEM) for mTLS to the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_client_certificate: Option<PathBuf>,
    /// Client certificate key (PEM); the path only is ever shown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_client_key: Option<PathBuf>,
    /// Collector base endpoint; `None` = `OTEL_EXPORTER_OTLP_ENDPOINT`, else
    /// export off (or the specification's default with `otlp_enabled = true`).
    #[serde(
        deserialize_with = "units::endpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub otlp_protocol: OtlpProtocol,
    /// Extra export headers (e.g. auth for a hosted collector); values are secret.
    #[serde(with = "units::secret_headers")]
    pub otlp_headers: Vec<(String, String)>,
    /// `service.name` resource attribute.
    #[serde(deserialize_with = "units::non_blank")]
    pub service_name: String,
    /// Extra resource attributes.
    #[serde(with = "units::pairs")]
    pub resource_attributes: Vec<(String, String)>,
    /// How often metrics are exported.
    #[serde(with = "units::positive")]
    pub metrics_export_interval: Duration,
    /// Deadline for one OTLP export, retries included.
    #[serde(with = "units::positive")]
    pub otlp_timeout: Duration,
    /// Finished spans waiting for export; more are dropped and counted.
    #[serde(deserialize_with = "units::at_least_one")]
    pub span_queue_size: usize,
    /// Distinct model values per instrument before `other`.
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_models: usize,
    /// Distinct tenant values per instrument before `other`.
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_tenants: usize,
    /// Distinct attribute sets per instrument; further sets go to one
    /// overflow series (`otel.metric.overflow = true`).
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_series: usize,
    /// Add `tokentap.prompt.size_class` (input tokens: ≤1Ki, ≤8Ki, ≤32Ki,
    /// ≤128Ki, more) to the TTFT and prefill histograms; off saves series.
    pub prompt_size_class: bool,
    /// Add `tokentap.load_class` (requests in flight to the same route and
    /// model when the request started, in the classes of
    /// `compare.load_classes`: `1`, `2-8`, `9+` by default) to the TTFT,
    /// prefill and decode-rate histograms; off saves series.
    pub load_class: bool,
    /// Label every `/metrics` series with `otel_scope_name` and
    /// `otel_scope_version` (the OpenTelemetry mapping's default); `false`
    /// leaves them out, a smaller scrape. OTLP export is unaffected.
    pub prometheus_scope_labels: bool,
    /// Write every Nth bucket boundary of each histogram on `/metrics`
    /// (and `+Inf`); 2 halves the bucket lines. OTLP keeps every bucket.
    #[serde(deserialize_with = "units::at_least_one")]
    pub prometheus_bucket_stride: usize,
    /// Which GenAI metric names to emit: `latest` (the current
    /// semantic-conventions-genai names), `legacy` (the v1.41.0 names and
    /// tokentap's own token counters) or `both`
    /// (`OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` = `latest`).
    pub semconv: Semconv,
    /// Headers redacted everywhere in addition to the built-in list.
    #[serde(with = "units::headers")]
    pub redact_headers: Vec<http::HeaderName>,
    /// One structured log line per request.
    pub access_log: bool,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Which finished requests' spans are exported (`[telemetry.sampling]`);
    /// metrics always count every request.
    pub sampling: SamplingConfig,
    /// Live statistics for the dashboard and slowdown detection (`[live]`).
    #[serde(skip)]
    pub live: LiveConfig,
    /// The comparison from production traffic and the load classes
    /// (`[compare]`).
    #[serde(skip)]
    pub compare: CompareConfig,
    /// Slowdown detection (`[[slo]]`) and its webhook (`[alerts]`).
    #[serde(skip)]
    pub slo: SloSettings,
    /// Session rollup bounds (`[sessions]` `max_sessions`, `idle_timeout`).
    #[serde(skip)]
    pub sessions: SessionLimits,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_enabled: None,
            otlp_certificate: None,
            otlp_client_certificate: None,
            otlp_client_key: None,
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            otlp_headers: Vec::new(),
            service_name: "tokentap".into(),
            resource_attributes: Vec::new(),
            metrics_export_interval: Duration::from_secs(10),
            otlp_timeout: Duration::from_secs(5),
            span_queue_size: 2048,
            max_models: 100,
            max_tenants: 100,
            max_series: 2000,
            prompt_size_class: true,
            load_class: true,
            prometheus_scope_labels: true,
            prometheus_bucket_stride: 1,
            semconv: Semconv::Latest,
            redact_headers: Vec::new(),
            access_log: true,
            log_format: LogFormat::Text,
            sampling: SamplingConfig::default(),
            live: LiveConfig::default(),
            compare: CompareConfig::default(),
            slo: SloSettings::default(),
            sessions: SessionLimits::default(),
        }
    }
}

/// `[telemetry.sampling]`: which spans are exported, decided when each
/// request ends. Failed, cut, malformed, slow and stalled requests are
/// always kept; the ratio picks among the rest by trace id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SamplingConfig {
    /// Share of ordinary requests whose span is exported, 0 to 1.
    #[serde(deserialize_with = "units::ratio")]
    pub ratio: f64,
    /// Always keep a request whose time to first token is above this.
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub keep_ttft_over: Option<Duration>,
    /// Always keep a request with a gap between content chunks above this.
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub keep_stall_over: Option<Duration>,
    /// Always keep a request that ran longer than this.
    #[serde(with = "units::opt_positive", skip_serializing_if = "Option::is_none")]
    pub keep_duration_over: Option<Duration>,
    /// Keep every request whose incoming `traceparent` is sampled.
    pub respect_parent: bool,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            ratio: 1.0,
            keep_ttft_over: None,
            keep_stall_over: None,
            keep_duration_over: None,
            respect_parent: false,
        }
    }
}

/// `[live]`: live statistics in rolling in-memory windows. Memory is
/// bounded by these values, not by traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LiveConfig {
    /// How far back the rolling windows reach.
    #[serde(with = "units::positive")]
    pub window: Duration,
    /// Time resolution of the windows (`window / bucket` buckets per series).
    #[serde(with = "units::positive")]
    pub bucket: Duration,
    /// Distinct (route, model, tenant) series kept; more fold into `other`.
    #[serde(deserialize_with = "units::at_least_one")]
    pub max_series: usize,
    /// Most recent requests listed on the dashboard.
    pub recent: usize,
}

impl Default for LiveConfig {
    fn default() -> Self {
        LiveConfig {
            window: Duration::from_secs(600),
            bucket: Duration::from_secs(5),
            max_series: 100,
            recent: 50,
        }
    }
}

/// Slowdown detection: the objectives and where breaches are sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SloSettings {
    /// `[[slo]]` entries, in file order.
    pub slos: Vec<SloConfig>,
    /// `[alerts]`: the webhook for breach and recovery events; `None` = off.
    pub alerts: Option<AlertsConfig>,
}

/// One `[[slo]]`: objectives over rolling windows for the requests its
/// selector (route and/or model glob) matches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloConfig {
    /// Name used in logs, metrics, span marks and webhook events.
    pub name: String,
    /// Only this configured route; `None` = every route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Model glob (`*`, `?`); `Some` = one verdict per matching model,
    /// `None` = one verdict for the whole selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Rolling window the objectives are checked over.
    #[serde(with = "units::positive", default = "slo_window")]
    pub window: Duration,
    /// Fewer requests (or values) than this in the window: no verdict.
    #[serde(default = "slo_min_requests")]
    pub min_requests: u64,
    /// Breach when TTFT p95 is above this.
    #[serde(
        with = "units::opt_positive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub ttft_p95: Option<Duration>,
    /// Breach when decode tokens/s p50 is below this.
    #[serde(
        default,
        deserialize_with = "units::opt_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub decode_tps_p50_min: Option<f64>,
    /// Breach when the largest stall in the window is above this.
    #[serde(
        with = "units::opt_positive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_stall: Option<Duration>,
    /// Breach when errors / requests is above this (0..1).
    #[serde(
        default,
        deserialize_with = "units::opt_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub error_ratio: Option<f64>,
    /// Breach when decode tokens/s p50 is more than this share (0..1)
    /// below its own p50 over `baseline_window`.
    #[serde(
        default,
        deserialize_with = "units::opt_decimal",
        skip_serializing_if = "Option::is_none"
    )]
    pub decode_tps_drop: Option<f64>,
    /// Baseline span for `decode_tps_drop` (at most `live.window`).
    #[serde(with = "units::duration", default = "slo_baseline_window")]
    pub baseline_window: Duration,
}

fn slo_window() -> Duration {
    Duration::from_secs(5 * 60)
}

fn slo_min_requests() -> u64 {
    10
}

fn slo_baseline_window() -> Duration {
    Duration::from_secs(60 * 60)
}

/// Webhook body shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AlertFormat {
    /// The event as a JSON object.
    Json,
    /// `{"text": "..."}`: a Slack incoming-webhook message.
    Slack,
}

/// `[alerts]`: breach and recovery events POSTed to a webhook, off the
/// request path, rate-limited per SLO and retried with backoff.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertsConfig {
    /// http or https URL the events are POSTed to.
    pub webhook_url: http::Uri,
    /// Body shape of the webhook events.
    pub format: AlertFormat,
    /// At most one POST per SLO per this interval (zero = no limit).
    pub min_interval: Duration,
    /// Limit for one POST attempt (connect, send, response).
    pub timeout: Duration,
    /// Retries after a network error, timeout, 5xx or 429.
    pub max_retries: u32,
    /// Extra request headers (e.g. authorization); values are redacted in `/config`.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// Values set on the command line (`tokentap [run|check] --listen …`).
/// Each one overrides the config file and env; the CLI (`crate::cli`) fills
/// this in, so `config` knows nothing of how flags are parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Config file; else `TOKENTAP_CONFIG`.
    pub config: Option<PathBuf>,
    /// One route `default` on `/` to this base URL (`--upstream`).
    pub upstream: Option<String>,
    /// API family of `upstream` (`--provider`); needs `upstream`.
    pub provider: Option<String>,
    /// `listen`.
    pub listen: Option<SocketAddr>,
    /// `admin_listen`: an address or `off`.
    pub admin_listen: Option<String>,
    /// `watch_config = true` when set.
    pub watch_config: bool,
    /// `telemetry.log_format`.
    pub log_format: Option<LogFormat>,
    /// `telemetry.otlp_endpoint`.
    pub otlp_endpoint: Option<String>,
    /// `telemetry.otlp_protocol`.
    pub otlp_protocol: Option<OtlpProtocol>,
    /// `tls.cert` (`--tls-cert`).
    pub tls_cert: Option<PathBuf>,
    /// `tls.key` (`--tls-key`).
    pub tls_key: Option<PathBuf>,
    /// `prices_file` (`--prices`).
    pub prices: Option<PathBuf>,
}

/// The admin listener's address when none is configured (loopback only;
/// 9464 is the port OpenTelemetry's Prometheus exporters use).
pub const DEFAULT_ADMIN_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9464);

/// The `admin_listen` value that turns the admin listener off.
pub const ADMIN_OFF: &str = "off";

/// Why the configuration was refused. Each variant displays as one line that
/// names the key and where its value came from (file, env var or flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read or is not valid TOML.
    #[error("config file {}: {message}", path.display())]
    File {
        /// The config file's path.
        path: PathBuf,
        /// What went wrong reading or parsing it.
        message: String,
    },
    /// A key nobody knows (usually a typo).
    #[error("unknown key `{key}` in {origin}; expected one of: {expected}")]
    UnknownKey {
        /// The unknown key, dotted.
        key: String,
        /// Where the key came from (file, environment, flag).
        origin: String,
        /// The keys accepted at that place.
        expected: String,
    },
    /// A value that does not parse or is out of range.
    #[error("invalid `{key}` (from {origin}): {message}")]
    Invalid {
        /// The key whose value is invalid, dotted.
        key: String,
        /// Where the value came from (file, environment, flag).
        origin: String,
        /// Why the value was rejected.
        message: String,
    },
    /// Neither `--upstream` nor `[[routes]]`.
    #[error("no routes: pass --upstream URL or add [[routes]] to the config file")]
    NoRoutes,
    /// Both `--upstream` and `[[routes]]`.
    #[error("--upstream conflicts with the routes set in {routes_origin}: use one or the other")]
    UpstreamAndRoutes {
        /// Where the `[[routes]]` were set.
        routes_origin: String,
    },
}

impl ConfigError {
    /// The offending key as shown to users (e.g. `routes[1].upstream`), if any.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { key, .. } | ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Where the offending value came from (`file PATH`, `environment variable
    /// NAME`, `flag --NAME`, `built-in default`), if known.
    pub fn origin(&self) -> Option<&str> {
        match self {
            ConfigError::UnknownKey { origin, .. } | ConfigError::Invalid { origin, .. } => {
                Some(origin)
            }
            ConfigError::UpstreamAndRoutes { routes_origin } => Some(routes_origin),
            _ => None,
        }
    }
}

/// Loads the configuration from the flags, the config file and the process
/// environment.
pub fn load(cli: &Overrides) -> Result<Config, ConfigError> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    load_with_env(cli, &env)
}

/// [`load`] with the environment given explicitly (for tests). The config
/// file is `cli.config`, else `TOKENTAP_CONFIG` from `env`.
pub fn load_with_env(cli: &Overrides, env: &[(String, String)]) -> Result<Config, ConfigError> {
    let mut fig = Figment::new().merge(layers::Layer::defaults());
    for layer in layers::otel_env(env)? {
        fig = fig.merge(layer);
    }
    if let Some(path) = file_with_env(cli, env) {
        fig = fig.merge(layers::toml_file(&path)?);
    }
    for layer in layers::tokentap_env(env)? {
        fig = fig.merge(layer);
    }
    let cx = validate::Cx::new(&fig);
    layers::check_upstream_conflict(&fig, cli, |k| cx.origin(k))?;
    for layer in layers::cli(cli)? {
        fig = fig.merge(layer);
    }
    let mut config = validate::build(&fig)?;
    config.proxy_env =
        proxy::ProxyEnv::from_vars(env).map_err(|(var, message)| ConfigError::Invalid {
            key: var.clone(),
            origin: format!("environment variable {var}"),
            message,
        })?;
    Ok(config)
}

/// The config file `load` reads: `--config`, else `TOKENTAP_CONFIG`.
pub fn file(cli: &Overrides) -> Option<PathBuf> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k == layers::CONFIG_ENV)
        .collect();
    file_with_env(cli, &env)
}

fn file_with_env(cli: &Overrides, env: &[(String, String)]) -> Option<PathBuf> {
    cli.config.clone().or_else(|| {
        env.iter()
            .rev()
            .find(|(k, v)| k == layers::CONFIG_ENV && !v.is_empty())
            .map(|(_, v)| PathBuf::from(v))
    })
}

/// Built-in defaults overlaid with `toml` only: no file, env or flags.
pub fn from_toml(toml: &str) -> Result<Config, ConfigError> {
    use figment::Provider;
    let source = Toml::string(toml);
    if let Err(e) = source.data() {
        let path = PathBuf::from("<TOML string>");
        return Err(ConfigError::File {
            path,
            message: e.to_string(),
        });
    }
    validate::build(
        &Figment::new()
            .merge(layers::Layer::defaults())
            .merge(source),
    )
}

impl Config {
    /// The effective configuration as TOML that [`from_toml`] reads back,
    /// with the tenant salt and OTLP header values replaced by `<redacted>`.
    pub fn redacted_toml(&self) -> String {
        let body = toml::to_string_pretty(&raw::RawConfig::redacted(self))
            .unwrap_or_else(|e| format!("# cannot render the configuration: {e}\n"));
        // The proxy variables are not keys of the file: comments, so the
        // text still reads back.
        match self.proxy_env.describe() {
            env if env.is_empty() => body,
            env => format!("{env}\n{body}"),
        }
    }

    /// The first key (see [`RESTART_ONLY`]) that differs in `new` but is
    /// bound at start-up, so a reload to `new` must be refused.
    pub fn restart_required(&self, new: &Config) -> Option<String> {
        restart::restart_only_change(self, new)
    }
}

#[cfg(test)]
mod tests;
