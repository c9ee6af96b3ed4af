//! Configuration: figment layers (defaults < TOML file < `TOKENTAP_*` env <
//! CLI flags) in, a validated `Config` out. Figment stays inside this module.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::providers::ProviderKind;

/// The validated configuration the rest of tokentap runs on.
#[derive(Debug, Clone)]
pub struct Config {
    /// Proxy listen address.
    pub listen: SocketAddr,
    pub server: ServerConfig,
    pub upstream: UpstreamConfig,
    /// Routes, in match order.
    pub routes: Vec<RouteConfig>,
    pub sniff: SniffConfig,
    pub meter: MeterConfig,
    pub tenant: TenantConfig,
    pub telemetry: TelemetryConfig,
}

/// Listener limits and shutdown.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Time allowed for a client to send a complete request head.
    pub header_read_timeout: Duration,
    /// Largest request head accepted (bytes).
    pub max_header_bytes: usize,
    /// Connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// On SIGTERM/SIGINT, how long in-flight requests may run before they are cut.
    pub shutdown_grace: Duration,
}

/// The upstream client.
#[derive(Debug, Clone)]
pub struct UpstreamConfig {
    pub connect_timeout: Duration,
    /// Abort when the upstream sends nothing for this long (none by default).
    pub idle_timeout: Option<Duration>,
    /// Abort any request that runs longer than this (none by default).
    pub total_timeout: Option<Duration>,
    /// Extra PEM CA bundle trusted beside the webpki roots.
    pub ca_file: Option<PathBuf>,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
}

/// One route: requests matching `prefix` (and `host`, when set) go to `upstream`.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub name: String,
    /// Path prefix, e.g. `/openai`; `/` matches everything. Stripped before forwarding.
    pub prefix: String,
    /// Match only this `Host` (without port), case-insensitive.
    pub host: Option<String>,
    /// Upstream base URL: scheme, authority and an optional base path.
    pub upstream: http::Uri,
    /// API family; `None` = detect from the request path.
    pub provider: Option<ProviderKind>,
}

/// Request body sniffing.
#[derive(Debug, Clone)]
pub struct SniffConfig {
    /// Request bodies up to this size are read to find `model` and `stream`.
    pub max_body_bytes: usize,
}

/// Response metering.
#[derive(Debug, Clone)]
pub struct MeterConfig {
    /// Largest single frame (SSE event or JSON body) the parser holds.
    pub max_frame_bytes: usize,
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
}

/// Tenant resolution.
#[derive(Debug, Clone)]
pub struct TenantConfig {
    /// Sources tried in order; the first that yields a value wins.
    pub sources: Vec<TenantSource>,
    /// Header for `TenantSource::Header`, lowercase.
    pub header: http::HeaderName,
    /// Salt for API-key hashes.
    pub salt: String,
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Telemetry export and cardinality.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// OTLP export on/off (on unless disabled or `OTEL_SDK_DISABLED=true`).
    pub otlp_enabled: bool,
    /// Collector base endpoint; `None` = SDK default / `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: OtlpProtocol,
    /// Extra export headers (e.g. auth for a hosted collector).
    pub otlp_headers: Vec<(String, String)>,
    pub service_name: String,
    /// Extra resource attributes.
    pub resource_attributes: Vec<(String, String)>,
    pub metrics_export_interval: Duration,
    /// Distinct model values per instrument before `other`.
    pub max_models: usize,
    /// Distinct tenant values per instrument before `other`.
    pub max_tenants: usize,
    /// Headers redacted everywhere in addition to the built-in list.
    pub redact_headers: Vec<http::HeaderName>,
    /// One structured log line per request.
    pub access_log: bool,
    pub log_format: LogFormat,
}
