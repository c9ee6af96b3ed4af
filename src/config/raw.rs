//! The config file's top-level shape (TOML, env, flags) with the built-in
//! defaults: the typed sections of `config.rs`, plus the parts whose file
//! form differs from `Config` (addresses, `[[routes]]`, `[alerts]`), which
//! `validate` turns into `Config` and `redacted` turns back for `/config`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::units::{self, REDACTED};
use super::{AdminConfig, TlsConfig};
use super::{
    AlertFormat, Config, DisconnectMode, Http2Mode, LiveConfig, MeterConfig, OnClientDisconnect,
    ServerConfig, SessionSource, SessionsConfig, SloConfig, SniffConfig, TelemetryConfig,
    TenantConfig, TenantSource, UpstreamConfig, WebsocketConfig,
};
use crate::meter::labels::RouteLabels;
use crate::pricing::PriceOverride;
use crate::providers::ProviderKind;

/// The whole file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawConfig {
    /// Proxy listen address, `IP:PORT`.
    pub listen: String,
    /// Admin listener address (metrics, health, config, dashboard), or `off`;
    /// unset = `DEFAULT_ADMIN_LISTEN`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
    /// Reload when the config file's content changes (polled every second).
    pub watch_config: bool,
    /// Listener limits and shutdown.
    pub server: ServerConfig,
    /// `[tls]`: TLS on the proxy listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    /// `[admin]`: protection of the admin listener.
    pub admin: AdminConfig,
    /// The upstream client.
    pub upstream: UpstreamConfig,
    /// Routes, in match order.
    pub routes: Vec<RawRoute>,
    /// Request body sniffing.
    pub sniff: SniffConfig,
    /// Response metering.
    pub meter: MeterConfig,
    /// WebSocket sessions.
    pub websocket: WebsocketConfig,
    /// Tenant resolution.
    pub tenant: TenantConfig,
    /// Agent sessions.
    pub sessions: SessionsConfig,
    /// Telemetry export and cardinality.
    pub telemetry: TelemetryConfig,
    /// The shared state store or the state file.
    pub state: super::StateConfig,
    /// Live statistics (dashboard, slowdown detection).
    pub live: LiveConfig,
    /// `[compare]`: the comparison from production traffic.
    pub compare: super::CompareConfig,
    /// `[[slo]]`: slowdown objectives.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<SloConfig>,
    /// `[alerts]`: webhook for SLO breach and recovery events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<RawAlerts>,
    /// `[[prices]]`: price overrides for every route (USD per million tokens).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub prices: Vec<PriceOverride>,
    /// A TOML file of `[[prices]]` entries (`--prices`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prices_file: Option<std::path::PathBuf>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRoute {
    /// Route name, used as the `tokentap.route` label.
    pub name: String,
    /// Path prefix, e.g. `/openai`; `/` matches everything. Stripped before forwarding.
    #[serde(default = "root_prefix")]
    pub prefix: String,
    /// Match only this `Host` (without port), case-insensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Upstream base URL: scheme, authority and an optional base path.
    pub upstream: String,
    /// API family; unset = detect from the request path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<ProviderKind>,
    /// Add `stream_options.include_usage` to OpenAI-format streaming requests
    /// that lack it, and strip the extra usage from the client's stream.
    #[serde(default)]
    pub inject_usage: bool,
    /// `[routes.sigv4]`: re-sign requests for AWS (credentials default to `AWS_*` env).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigv4: Option<super::sigv4::SigV4Settings>,
    /// `cancel` (default) or `drain`: what happens to the upstream request
    /// when the client goes away mid-stream.
    #[serde(default, skip_serializing_if = "is_cancel")]
    pub on_client_disconnect: DisconnectMode,
    /// Drain bound for this route; unset = `upstream.drain_timeout`.
    #[serde(
        with = "units::opt_positive",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub drain_timeout: Option<Duration>,
    /// Upstream protocol: `auto` (HTTP/2 when TLS ALPN picks it), `always`, `never`.
    #[serde(default, skip_serializing_if = "is_auto")]
    pub http2: Http2Mode,
    /// `[[routes.prices]]`: price overrides for this route only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prices: Vec<PriceOverride>,
    /// Egress proxy for this route: `"none"` (straight to the upstream) or
    /// `http://[user:password@]host:port`; unset = the `HTTPS_PROXY` family
    /// of environment variables. The password is redacted in `/config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// Operator labels, e.g. `{ hardware = "H100" }`: span attributes
    /// `tokentap.route.label.<key>`, never metric labels.
    #[serde(default, skip_serializing_if = "RouteLabels::is_empty")]
    pub labels: RouteLabels,
}

fn is_auto(m: &Http2Mode) -> bool {
    *m == Http2Mode::Auto
}

fn is_cancel(m: &DisconnectMode) -> bool {
    *m == DisconnectMode::Cancel
}

fn root_prefix() -> String {
    "/".into()
}

/// `[alerts]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAlerts {
    /// http or https URL events are POSTed to (required).
    pub webhook_url: String,
    /// `json` or `slack`.
    pub format: AlertFormat,
    /// At most one POST per SLO per this interval.
    #[serde(with = "units::duration")]
    pub min_interval: Duration,
    /// Limit for one POST attempt.
    #[serde(with = "units::positive")]
    pub timeout: Duration,
    /// Retries after network errors, timeouts, 5xx and 429.
    pub max_retries: u32,
    /// Extra request headers; values are redacted when the config is shown.
    pub headers: BTreeMap<String, String>,
}

impl Default for RawAlerts {
    fn default() -> Self {
        RawAlerts {
            webhook_url: String::new(),
            format: AlertFormat::Json,
            min_interval: Duration::from_secs(60),
            timeout: Duration::from_secs(10),
            max_retries: 5,
            headers: BTreeMap::new(),
        }
    }
}

impl Default for RawConfig {
    fn default() -> Self {
        RawConfig {
            listen: "127.0.0.1:8080".into(),
            admin_listen: None,
            watch_config: false,
            server: ServerConfig::default(),
            tls: None,
            admin: AdminConfig::default(),
            upstream: UpstreamConfig::default(),
            routes: Vec::new(),
            sniff: SniffConfig::default(),
            meter: MeterConfig::default(),
            websocket: WebsocketConfig::default(),
            tenant: TenantConfig::default(),
            sessions: SessionsConfig::default(),
            telemetry: TelemetryConfig::default(),
            state: super::StateConfig::default(),
            live: LiveConfig::default(),
            compare: super::CompareConfig::default(),
            slo: Vec::new(),
            alerts: None,
            prices: Vec::new(),
            prices_file: None,
        }
    }
}

impl TenantSource {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantSource::Header => "header",
            TenantSource::Body => "body",
            TenantSource::ApiKey => "api_key",
            TenantSource::ClientCert => "client_cert",
        }
    }
}

impl SessionSource {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionSource::Header => "header",
            SessionSource::Body => "body",
            SessionSource::Agents => "agents",
        }
    }
}

impl RawConfig {
    /// The effective config in file form, with secrets (tenant salt, OTLP
    /// header values) replaced by [`REDACTED`].
    pub(super) fn redacted(c: &Config) -> RawConfig {
        let (u, t) = (&c.upstream, &c.telemetry);
        RawConfig {
            listen: c.listen.to_string(),
            admin_listen: Some(
                c.admin_listen
                    .map_or_else(|| super::ADMIN_OFF.to_owned(), |a| a.to_string()),
            ),
            watch_config: c.watch_config,
            server: c.server.clone(),
            tls: c.tls.clone(),
            admin: super::AdminConfig {
                // A token read from `token_file` shows as that file only:
                // both keys together would not load back.
                token: c
                    .admin
                    .token
                    .clone()
                    .filter(|_| c.admin.token_file.is_none()),
                ..c.admin.clone()
            },
            upstream: c.upstream.clone(),
            routes: c
                .routes
                .iter()
                .map(|r| RawRoute {
                    name: r.name.clone(),
                    prefix: r.prefix.clone(),
                    host: r.host.clone(),
                    upstream: r.upstream_shown(),
                    provider: r.provider,
                    inject_usage: r.inject_usage,
                    // Region, service and key id only: secrets never leave.
                    sigv4: r.sigv4.as_ref().map(|s| super::sigv4::SigV4Settings {
                        region: Some(s.region.clone()),
                        service: Some(s.service.clone()),
                        access_key_id: Some(s.access_key_id.clone()),
                        secret_access_key: None,
                        session_token: None,
                    }),
                    on_client_disconnect: match r.on_client_disconnect {
                        OnClientDisconnect::Cancel => DisconnectMode::Cancel,
                        OnClientDisconnect::Drain { .. } => DisconnectMode::Drain,
                    },
                    drain_timeout: match r.on_client_disconnect {
                        OnClientDisconnect::Drain { timeout } if timeout != u.drain_timeout => {
                            Some(timeout)
                        }
                        _ => None,
                    },
                    http2: r.http2,
                    prices: r.prices.clone(),
                    proxy: r.proxy.shown(),
                    labels: r.labels.clone(),
                })
                .collect(),
            sniff: c.sniff.clone(),
            meter: c.meter.clone(),
            websocket: c.websocket.clone(),
            tenant: c.tenant.clone(),
            sessions: c.sessions.clone(),
            telemetry: t.clone(),
            state: c.state.clone(),
            live: t.live.clone(),
            compare: t.compare.clone(),
            slo: t.slo.slos.clone(),
            alerts: t.slo.alerts.as_ref().map(raw_alerts),
            prices: c.prices.clone(),
            prices_file: c.prices_file.clone(),
        }
    }
}

/// The webhook URL keeps scheme and host; its path and query (a Slack
/// webhook's path is its secret) and every header value are redacted.
fn raw_alerts(a: &super::AlertsConfig) -> RawAlerts {
    let url = &a.webhook_url;
    let scheme = url.scheme_str().unwrap_or("https");
    let authority = url.authority().map_or("", |a| a.as_str());
    // `<redacted>` is no valid URL path; this reads back as a URL.
    let path = if url.path() == "/" && url.query().is_none() {
        ""
    } else {
        "/redacted"
    };
    RawAlerts {
        webhook_url: format!("{scheme}://{authority}{path}"),
        format: a.format,
        min_interval: a.min_interval,
        timeout: a.timeout,
        max_retries: a.max_retries,
        headers: a
            .headers
            .iter()
            .map(|(k, _)| (k.to_string(), REDACTED.to_string()))
            .collect(),
    }
}
