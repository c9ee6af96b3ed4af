//! The config file's shape: serde structs exactly as written by users (TOML,
//! env, flags) with the built-in defaults; `validate` turns them into `Config`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::parse::{fmt_duration, fmt_size};
use super::{
    AlertFormat, Config, DisconnectMode, LogFormat, OnClientDisconnect, OtlpProtocol, TenantSource,
};
use crate::providers::ProviderKind;

/// Written in place of secrets when the effective config is shown.
pub(super) const REDACTED: &str = "<redacted>";

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
    pub server: RawServer,
    /// `[tls]`: TLS on the proxy listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
    /// `[admin]`: protection of the admin listener.
    pub admin: RawAdmin,
    /// The upstream client.
    pub upstream: RawUpstream,
    /// Routes, in match order.
    pub routes: Vec<RawRoute>,
    /// Request body sniffing.
    pub sniff: RawSniff,
    /// Response metering.
    pub meter: RawMeter,
    /// Tenant resolution.
    pub tenant: RawTenant,
    /// Telemetry export and cardinality.
    pub telemetry: RawTelemetry,
    /// Live statistics (dashboard, slowdown detection).
    pub live: RawLive,
    /// `[[slo]]`: slowdown objectives.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<RawSlo>,
    /// `[alerts]`: webhook for SLO breach and recovery events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<RawAlerts>,
}

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawServer {
    /// Time allowed for a client to send a complete request head.
    pub header_read_timeout: Quantity,
    /// Largest request head accepted (size).
    pub max_header_bytes: Quantity,
    /// Most header fields a request may carry.
    pub max_headers: usize,
    /// Connections served at once; more wait in the accept queue.
    pub max_connections: usize,
    /// On SIGTERM/SIGINT, how long in-flight requests may run before they are cut.
    pub shutdown_grace: Quantity,
    /// Serving threads (0 = one per CPU).
    pub threads: usize,
}

/// `[tls]` or `[admin.tls]`: certificate files and client certificates.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTls {
    /// Certificate chain file (PEM), leaf first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
    /// Private key file (PEM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// `[[tls.sni]]`: more certificates, chosen by server name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sni: Vec<RawSni>,
    /// CA bundle (PEM) that client certificates must chain to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca: Option<String>,
    /// `required` (default with `client_ca`) or `optional`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_auth: Option<String>,
}

/// One `[[tls.sni]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSni {
    /// Server name this certificate is served for.
    pub name: String,
    /// Certificate chain file (PEM).
    pub cert: String,
    /// Private key file (PEM).
    pub key: String,
}

/// `[admin]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawAdmin {
    /// Bearer token every admin request must carry (except open probes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// File holding the bearer token (trailing whitespace ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// `/healthz` and `/readyz` answer without the token.
    pub open_probes: bool,
    /// Allow an unprotected admin listener beyond loopback.
    pub allow_unprotected: bool,
    /// `[admin.tls]`: TLS and client certificates on the admin listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<RawTls>,
}

impl Default for RawAdmin {
    fn default() -> Self {
        RawAdmin {
            token: None,
            token_file: None,
            open_probes: true,
            allow_unprotected: false,
            tls: None,
        }
    }
}

/// `[upstream]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawUpstream {
    /// Time allowed to open a TCP (and TLS) connection to the upstream.
    pub connect_timeout: Quantity,
    /// Abort when the upstream sends nothing for this long (none by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<Quantity>,
    /// Abort any request that runs longer than this (none by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_timeout: Option<Quantity>,
    /// Extra PEM CA bundle trusted beside the webpki roots.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// How long an idle pooled connection is kept.
    pub pool_idle_timeout: Quantity,
    /// Idle pooled connections kept per upstream host.
    pub pool_max_idle_per_host: usize,
    /// Extra attempts when opening a connection (TCP or TLS) fails; 0 = none.
    /// Nothing of the request has been sent then, so a retry is safe.
    pub connect_retries: u32,
    /// Wait before the first connect retry; doubles for each further one.
    pub connect_retry_backoff: Quantity,
    /// Default bound on reading an upstream body on after its client left
    /// (routes with `on_client_disconnect = "drain"`).
    pub drain_timeout: Quantity,
    /// Most body bytes one drain reads before it gives up (size).
    pub drain_max_bytes: Quantity,
    /// Drains running at once; past this, a disconnect cancels.
    pub max_drains: usize,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Quantity>,
}

fn is_cancel(m: &DisconnectMode) -> bool {
    *m == DisconnectMode::Cancel
}

fn root_prefix() -> String {
    "/".into()
}

/// `[sniff]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSniff {
    /// Request bodies up to this size are read to find `model` and `stream`.
    pub max_body_bytes: Quantity,
}

/// `[meter]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawMeter {
    /// Largest single frame (SSE event or JSON body) the parser holds.
    pub max_frame_bytes: Quantity,
    /// Count tokens with the model's tokenizer when a stream reports no usage.
    pub tokenizer: bool,
}

/// `[tenant]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTenant {
    /// Sources tried in order: `header`, `body`, `api_key`.
    pub sources: StringList,
    /// Header for the `header` source.
    pub header: String,
    /// Salt for API-key hashes; must be the same on every replica.
    pub salt: String,
}

/// `[telemetry]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawTelemetry {
    /// OTLP export on/off; unset = on exactly when an endpoint is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_enabled: Option<bool>,
    /// Collector base endpoint; unset = SDK default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// `grpc` or `http/protobuf`.
    pub otlp_protocol: OtlpProtocol,
    /// Extra export headers (e.g. auth for a hosted collector).
    pub otlp_headers: BTreeMap<String, String>,
    /// CA bundle (PEM) for the collector's certificate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_certificate: Option<String>,
    /// Client certificate chain (PEM) for mTLS to the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_client_certificate: Option<String>,
    /// Client key (PEM) for mTLS to the collector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_client_key: Option<String>,
    /// `service.name` resource attribute.
    pub service_name: String,
    /// Extra resource attributes.
    pub resource_attributes: BTreeMap<String, String>,
    /// How often metrics are exported.
    pub metrics_export_interval: Quantity,
    /// Deadline for one OTLP export, retries included.
    pub otlp_timeout: Quantity,
    /// Finished spans waiting for export; more are dropped and counted.
    pub span_queue_size: usize,
    /// Distinct model values per instrument before `other`.
    pub max_models: usize,
    /// Distinct tenant values per instrument before `other`.
    pub max_tenants: usize,
    /// Distinct attribute sets per instrument before the overflow series.
    pub max_series: usize,
    /// Headers redacted everywhere in addition to the built-in list.
    pub redact_headers: StringList,
    /// One structured log line per request.
    pub access_log: bool,
    /// `text` or `json`.
    pub log_format: LogFormat,
}

/// `[live]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawLive {
    /// How far back the rolling windows reach.
    pub window: Quantity,
    /// Time resolution of the windows.
    pub bucket: Quantity,
    /// Distinct (route, model, tenant) series kept; more fold into `other`.
    pub max_series: usize,
    /// Most recent requests listed on the dashboard.
    pub recent: usize,
}

/// One `[[slo]]` entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSlo {
    /// Name in logs, metrics, span marks and webhook events.
    pub name: String,
    /// Only this configured route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// Model glob; set = one verdict per matching model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Rolling window the objectives are checked over.
    #[serde(default = "slo_window")]
    pub window: Quantity,
    /// Fewer requests than this in the window: no verdict.
    #[serde(default = "slo_min_requests")]
    pub min_requests: u64,
    /// Breach when TTFT p95 is above this duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_p95: Option<Quantity>,
    /// Breach when decode tokens/s p50 is below this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tps_p50_min: Option<f64>,
    /// Breach when the largest stall is above this duration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_stall: Option<Quantity>,
    /// Breach when errors / requests is above this (0..1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_ratio: Option<f64>,
    /// Breach when decode tokens/s p50 falls more than this share below its baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_tps_drop: Option<f64>,
    /// Baseline span for `decode_tps_drop`.
    #[serde(default = "slo_baseline_window")]
    pub baseline_window: Quantity,
}

fn slo_window() -> Quantity {
    Quantity::text("5m")
}

fn slo_min_requests() -> u64 {
    10
}

fn slo_baseline_window() -> Quantity {
    Quantity::text("1h")
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
    pub min_interval: Quantity,
    /// Limit for one POST attempt.
    pub timeout: Quantity,
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
            min_interval: Quantity::text("1m"),
            timeout: Quantity::text("10s"),
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
            server: RawServer::default(),
            tls: None,
            admin: RawAdmin::default(),
            upstream: RawUpstream::default(),
            routes: Vec::new(),
            sniff: RawSniff::default(),
            meter: RawMeter::default(),
            tenant: RawTenant::default(),
            telemetry: RawTelemetry::default(),
            live: RawLive::default(),
            slo: Vec::new(),
            alerts: None,
        }
    }
}

impl Default for RawLive {
    fn default() -> Self {
        RawLive {
            window: Quantity::text("10m"),
            bucket: Quantity::text("5s"),
            max_series: 100,
            recent: 50,
        }
    }
}

impl Default for RawServer {
    fn default() -> Self {
        RawServer {
            header_read_timeout: Quantity::text("10s"),
            max_header_bytes: Quantity::text("64KiB"),
            max_headers: 100,
            max_connections: 10_000,
            shutdown_grace: Quantity::text("30s"),
            threads: 0,
        }
    }
}

impl Default for RawUpstream {
    fn default() -> Self {
        RawUpstream {
            connect_timeout: Quantity::text("5s"),
            idle_timeout: None,
            total_timeout: None,
            ca_file: None,
            pool_idle_timeout: Quantity::text("90s"),
            pool_max_idle_per_host: 64,
            connect_retries: 0,
            connect_retry_backoff: Quantity::text("100ms"),
            drain_timeout: Quantity::text("30s"),
            drain_max_bytes: Quantity::text("16MiB"),
            max_drains: 256,
        }
    }
}

impl Default for RawSniff {
    fn default() -> Self {
        RawSniff {
            max_body_bytes: Quantity::text("8MiB"),
        }
    }
}

impl Default for RawMeter {
    fn default() -> Self {
        RawMeter {
            max_frame_bytes: Quantity::text("4MiB"),
            tokenizer: true,
        }
    }
}

impl Default for RawTenant {
    fn default() -> Self {
        RawTenant {
            sources: StringList(vec!["header".into(), "body".into(), "api_key".into()]),
            header: "x-tenant-id".into(),
            salt: "tokentap".into(),
        }
    }
}

impl Default for RawTelemetry {
    fn default() -> Self {
        RawTelemetry {
            otlp_enabled: None,
            otlp_endpoint: None,
            otlp_protocol: OtlpProtocol::HttpProtobuf,
            otlp_headers: BTreeMap::new(),
            otlp_certificate: None,
            otlp_client_certificate: None,
            otlp_client_key: None,
            service_name: "tokentap".into(),
            resource_attributes: BTreeMap::new(),
            metrics_export_interval: Quantity::text("10s"),
            otlp_timeout: Quantity::text("5s"),
            span_queue_size: 2048,
            max_models: 100,
            max_tenants: 100,
            max_series: 2000,
            redact_headers: StringList(Vec::new()),
            access_log: true,
            log_format: LogFormat::Text,
        }
    }
}

/// A duration or size as written: a string with a unit or a bare number.
/// Kept raw so validation can say *why* `5` is not a duration.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Quantity {
    Int(i64),
    Float(f64),
    Text(String),
}

impl Quantity {
    fn text(s: &str) -> Self {
        Quantity::Text(s.into())
    }

    /// The value as text, for the unit parsers.
    pub fn as_text(&self) -> String {
        match self {
            Quantity::Int(n) => n.to_string(),
            Quantity::Float(f) => f.to_string(),
            Quantity::Text(s) => s.clone(),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Quantity::Int(n) => s.serialize_i64(*n),
            Quantity::Float(f) => s.serialize_f64(*f),
            Quantity::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string with a unit, like \"5s\" or \"8MiB\"")
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Quantity, E> {
                Ok(Quantity::Int(n))
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Quantity, E> {
                i64::try_from(n)
                    .map(Quantity::Int)
                    .map_err(|_| E::custom(format!("{n} is too large")))
            }
            fn visit_f64<E: de::Error>(self, n: f64) -> Result<Quantity, E> {
                Ok(Quantity::Float(n))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Quantity, E> {
                Ok(Quantity::text(s))
            }
        }
        d.deserialize_any(V)
    }
}

/// A list of names: a TOML array, or a comma-separated string (handy in env vars).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct StringList(pub Vec<String>);

impl<'de> Deserialize<'de> for StringList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StringList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of strings or a comma-separated string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<StringList, E> {
                let items = s.split(',').map(str::trim).filter(|i| !i.is_empty());
                Ok(StringList(items.map(String::from).collect()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<StringList, A::Error> {
                let mut out = Vec::new();
                while let Some(item) = seq.next_element::<String>()? {
                    out.push(item);
                }
                Ok(StringList(out))
            }
        }
        d.deserialize_any(V)
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

fn redacted_map(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, _)| (k.clone(), REDACTED.to_string()))
        .collect()
}

fn plain_map(pairs: &[(String, String)]) -> BTreeMap<String, String> {
    pairs.iter().cloned().collect()
}

fn dur(d: std::time::Duration) -> Quantity {
    Quantity::Text(fmt_duration(d))
}

fn size(n: usize) -> Quantity {
    Quantity::Text(fmt_size(n))
}

impl RawConfig {
    /// The effective config in file form, with secrets (tenant salt, OTLP
    /// header values) replaced by [`REDACTED`].
    pub fn redacted(c: &Config) -> RawConfig {
        let (s, u, t) = (&c.server, &c.upstream, &c.telemetry);
        RawConfig {
            listen: c.listen.to_string(),
            admin_listen: Some(
                c.admin_listen
                    .map_or_else(|| super::ADMIN_OFF.to_owned(), |a| a.to_string()),
            ),
            watch_config: c.watch_config,
            server: RawServer {
                header_read_timeout: dur(s.header_read_timeout),
                max_header_bytes: size(s.max_header_bytes),
                max_headers: s.max_headers,
                max_connections: s.max_connections,
                shutdown_grace: dur(s.shutdown_grace),
                threads: s.threads,
            },
            tls: c.tls.as_ref().map(raw_tls),
            admin: RawAdmin {
                token: c.admin.token.as_ref().map(|_| REDACTED.to_string()),
                token_file: None,
                open_probes: c.admin.open_probes,
                allow_unprotected: c.admin.allow_unprotected,
                tls: c.admin.tls.as_ref().map(raw_tls),
            },
            upstream: RawUpstream {
                connect_timeout: dur(u.connect_timeout),
                idle_timeout: u.idle_timeout.map(dur),
                total_timeout: u.total_timeout.map(dur),
                ca_file: u.ca_file.as_ref().map(|p| p.display().to_string()),
                pool_idle_timeout: dur(u.pool_idle_timeout),
                pool_max_idle_per_host: u.pool_max_idle_per_host,
                connect_retries: u.connect_retries,
                connect_retry_backoff: dur(u.connect_retry_backoff),
                drain_timeout: dur(u.drain_timeout),
                drain_max_bytes: size(u.drain_max_bytes),
                max_drains: u.max_drains,
            },
            routes: c
                .routes
                .iter()
                .map(|r| RawRoute {
                    name: r.name.clone(),
                    prefix: r.prefix.clone(),
                    host: r.host.clone(),
                    upstream: r.upstream.to_string(),
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
                            Some(dur(timeout))
                        }
                        _ => None,
                    },
                })
                .collect(),
            sniff: RawSniff {
                max_body_bytes: size(c.sniff.max_body_bytes),
            },
            meter: RawMeter {
                max_frame_bytes: size(c.meter.max_frame_bytes),
                tokenizer: c.meter.tokenizer,
            },
            tenant: RawTenant {
                sources: StringList(c.tenant.sources.iter().map(|s| s.as_str().into()).collect()),
                header: c.tenant.header.to_string(),
                salt: REDACTED.into(),
            },
            telemetry: RawTelemetry {
                otlp_enabled: Some(t.otlp_enabled),
                otlp_endpoint: t.otlp_endpoint.clone(),
                otlp_protocol: t.otlp_protocol,
                otlp_headers: redacted_map(&t.otlp_headers),
                otlp_certificate: t.otlp_certificate.as_ref().map(|p| path(p)),
                otlp_client_certificate: t.otlp_client_certificate.as_ref().map(|p| path(p)),
                // The path only: the key file's content never leaves.
                otlp_client_key: t.otlp_client_key.as_ref().map(|p| path(p)),
                service_name: t.service_name.clone(),
                resource_attributes: plain_map(&t.resource_attributes),
                metrics_export_interval: dur(t.metrics_export_interval),
                otlp_timeout: dur(t.otlp_timeout),
                span_queue_size: t.span_queue_size,
                max_models: t.max_models,
                max_tenants: t.max_tenants,
                max_series: t.max_series,
                redact_headers: StringList(
                    t.redact_headers.iter().map(|h| h.to_string()).collect(),
                ),
                access_log: t.access_log,
                log_format: t.log_format,
            },
            live: RawLive {
                window: dur(t.live.window),
                bucket: dur(t.live.bucket),
                max_series: t.live.max_series,
                recent: t.live.recent,
            },
            slo: t.slo.slos.iter().map(raw_slo).collect(),
            alerts: t.slo.alerts.as_ref().map(raw_alerts),
        }
    }
}

fn path(p: &std::path::Path) -> String {
    p.display().to_string()
}

fn raw_tls(t: &super::TlsConfig) -> RawTls {
    RawTls {
        cert: Some(path(&t.cert)),
        key: Some(path(&t.key)),
        sni: t
            .sni
            .iter()
            .map(|s| RawSni {
                name: s.name.clone(),
                cert: path(&s.cert),
                key: path(&s.key),
            })
            .collect(),
        client_ca: t.client_ca.as_ref().map(|p| path(p)),
        client_auth: match t.client_auth {
            super::ClientAuth::Off => None,
            super::ClientAuth::Optional => Some("optional".into()),
            super::ClientAuth::Required => Some("required".into()),
        },
    }
}

fn raw_slo(s: &super::SloConfig) -> RawSlo {
    RawSlo {
        name: s.name.clone(),
        route: s.route.clone(),
        model: s.model.clone(),
        window: dur(s.window),
        min_requests: s.min_requests,
        ttft_p95: s.ttft_p95.map(dur),
        decode_tps_p50_min: s.decode_tps_p50_min,
        max_stall: s.max_stall.map(dur),
        error_ratio: s.error_ratio,
        decode_tps_drop: s.decode_tps_drop,
        baseline_window: dur(s.baseline_window),
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
        min_interval: dur(a.min_interval),
        timeout: dur(a.timeout),
        max_retries: a.max_retries,
        headers: a
            .headers
            .iter()
            .map(|(k, _)| (k.to_string(), REDACTED.to_string()))
            .collect(),
    }
}
