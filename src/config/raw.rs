//! The config file's shape: serde structs exactly as written by users (TOML,
//! env, flags) with the built-in defaults; `validate` turns them into `Config`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::parse::fmt_duration;
use super::units::REDACTED;
use super::{
    AlertFormat, Config, DisconnectMode, LiveConfig, MeterConfig, OnClientDisconnect, ServerConfig,
    SniffConfig, TelemetryConfig, TenantConfig, TenantSource, UpstreamConfig,
};
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
    /// The upstream client.
    pub upstream: UpstreamConfig,
    /// Routes, in match order.
    pub routes: Vec<RawRoute>,
    /// Request body sniffing.
    pub sniff: SniffConfig,
    /// Response metering.
    pub meter: MeterConfig,
    /// Tenant resolution.
    pub tenant: TenantConfig,
    /// Telemetry export and cardinality.
    pub telemetry: TelemetryConfig,
    /// Live statistics (dashboard, slowdown detection).
    pub live: LiveConfig,
    /// `[[slo]]`: slowdown objectives.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slo: Vec<RawSlo>,
    /// `[alerts]`: webhook for SLO breach and recovery events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<RawAlerts>,
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
    pub sigv4: Option<crate::providers::sigv4::SigV4Settings>,
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
            server: ServerConfig::default(),
            upstream: UpstreamConfig::default(),
            routes: Vec::new(),
            sniff: SniffConfig::default(),
            meter: MeterConfig::default(),
            tenant: TenantConfig::default(),
            telemetry: TelemetryConfig::default(),
            live: LiveConfig::default(),
            slo: Vec::new(),
            alerts: None,
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

impl TenantSource {
    /// The name used in config.
    pub fn as_str(self) -> &'static str {
        match self {
            TenantSource::Header => "header",
            TenantSource::Body => "body",
            TenantSource::ApiKey => "api_key",
        }
    }
}

fn dur(d: std::time::Duration) -> Quantity {
    Quantity::Text(fmt_duration(d))
}

impl RawConfig {
    /// The effective config in file form, with secrets (tenant salt, OTLP
    /// header values) replaced by [`REDACTED`].
    pub fn redacted(c: &Config) -> RawConfig {
        let (u, t) = (&c.upstream, &c.telemetry);
        RawConfig {
            listen: c.listen.to_string(),
            admin_listen: Some(
                c.admin_listen
                    .map_or_else(|| super::ADMIN_OFF.to_owned(), |a| a.to_string()),
            ),
            watch_config: c.watch_config,
            server: c.server.clone(),
            upstream: c.upstream.clone(),
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
                    sigv4: r
                        .sigv4
                        .as_ref()
                        .map(|s| crate::providers::sigv4::SigV4Settings {
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
            sniff: c.sniff.clone(),
            meter: c.meter.clone(),
            tenant: c.tenant.clone(),
            telemetry: t.clone(),
            live: t.live.clone(),
            slo: t.slo.slos.iter().map(raw_slo).collect(),
            alerts: t.slo.alerts.as_ref().map(raw_alerts),
        }
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
