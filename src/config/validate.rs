//! Validation: the merged figment in, a typed `Config` (or an error naming
//! the key and the source that set it) out.

mod slo;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use figment::error::Kind;
use figment::value::Value;
use figment::{Figment, Metadata, Source};

use super::raw::{
    Quantity, RawAdmin, RawConfig, RawLive, RawRoute, RawTelemetry, RawTenant, RawTls, RawUpstream,
};
use super::{
    ADMIN_OFF, Config, ConfigError, DEFAULT_ADMIN_LISTEN, MeterConfig, RouteConfig, ServerConfig,
    SniffConfig, TelemetryConfig, TenantConfig, TenantSource, UpstreamConfig, parse,
};
use super::{AdminConfig, ClientAuth, SniCert, TlsConfig};
use super::{DisconnectMode, OnClientDisconnect};
use super::{LiveConfig, SloSettings};

/// The merged figment, kept to answer "where did this key come from?".
pub(super) struct Cx<'a> {
    fig: &'a Figment,
    root: Option<Value>,
}

/// `routes.1.upstream` → `routes[1].upstream`.
pub(super) fn display_key(path: &str) -> String {
    let mut out = String::new();
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        if seg.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{seg}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(seg);
        }
    }
    out
}

fn describe(md: &Metadata) -> String {
    match &md.source {
        Some(Source::File(p)) => format!("file {}", p.display()),
        _ => md.name.to_string(),
    }
}

impl<'a> Cx<'a> {
    pub fn new(fig: &'a Figment) -> Self {
        Cx {
            fig,
            root: fig.find_value("").ok(),
        }
    }

    /// The source of the value at a dotted path (array elements by index);
    /// the deepest existing ancestor answers for a missing key.
    pub fn origin(&self, path: &str) -> String {
        let mut cur = self.root.as_ref();
        let mut tag = cur.map(Value::tag);
        for seg in path.split('.').filter(|s| !s.is_empty()) {
            cur = match cur {
                Some(Value::Dict(_, d)) => d.get(seg),
                Some(Value::Array(_, a)) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            match cur {
                Some(v) => tag = Some(v.tag()),
                None => break,
            }
        }
        tag.and_then(|t| self.fig.get_metadata(t))
            .map_or_else(|| "unknown source".into(), describe)
    }

    fn invalid(&self, path: &str, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            key: display_key(path),
            origin: self.origin(path),
            message: message.into(),
        }
    }

    /// Turns a figment extraction error into one naming key and source.
    pub fn figment_error(&self, e: figment::Error) -> ConfigError {
        let Some(e) = e.into_iter().next() else {
            return ConfigError::Invalid {
                key: String::new(),
                origin: "unknown source".into(),
                message: "invalid configuration".into(),
            };
        };
        let path = e.path.join(".");
        match &e.kind {
            Kind::UnknownField(field, expected) => {
                // Figment already appends the field when the key itself fails.
                let full = match e.path.last() {
                    Some(last) if last == field => path.clone(),
                    Some(_) => format!("{path}.{field}"),
                    None => field.clone(),
                };
                ConfigError::UnknownKey {
                    key: display_key(&full),
                    origin: self.origin(&full),
                    expected: expected.join(", "),
                }
            }
            kind => ConfigError::Invalid {
                key: display_key(&path),
                origin: e
                    .metadata
                    .as_ref()
                    .map_or_else(|| self.origin(&path), describe),
                message: kind_message(kind),
            },
        }
    }

    fn duration(&self, path: &str, q: &Quantity) -> Result<Duration, ConfigError> {
        parse::duration(&q.as_text()).map_err(|m| self.invalid(path, m))
    }

    fn positive(&self, path: &str, q: &Quantity) -> Result<Duration, ConfigError> {
        let d = self.duration(path, q)?;
        if d.is_zero() {
            return Err(self.invalid(path, "must be longer than zero"));
        }
        Ok(d)
    }

    fn size(&self, path: &str, q: &Quantity) -> Result<usize, ConfigError> {
        let n = parse::size(&q.as_text()).map_err(|m| self.invalid(path, m))?;
        if n == 0 {
            return Err(self.invalid(path, "must be larger than zero"));
        }
        Ok(n)
    }

    /// A header-count limit: hyper allocates room for this many per request.
    fn max_headers(&self, path: &str, n: usize) -> Result<usize, ConfigError> {
        const MAX: usize = 10_000;
        if !(1..=MAX).contains(&n) {
            return Err(self.invalid(path, format!("must be between 1 and {MAX}")));
        }
        Ok(n)
    }

    fn threads(&self, path: &str, n: usize) -> Result<usize, ConfigError> {
        if n > MAX_THREADS {
            return Err(self.invalid(
                path,
                format!("{n} is more than {MAX_THREADS}; use 0 for one per CPU"),
            ));
        }
        Ok(n)
    }

    fn count(&self, path: &str, n: usize) -> Result<usize, ConfigError> {
        if n == 0 {
            return Err(self.invalid(path, "must be at least 1"));
        }
        Ok(n)
    }

    fn addr(&self, path: &str, s: &str) -> Result<SocketAddr, ConfigError> {
        s.trim().parse().map_err(|_| {
            self.invalid(
                path,
                format!(
                    "`{s}` is not a socket address; write IP:PORT, e.g. 127.0.0.1:8080 or [::]:8080"
                ),
            )
        })
    }

    fn header(&self, path: &str, s: &str) -> Result<http::HeaderName, ConfigError> {
        parse::header_name(s).map_err(|m| self.invalid(path, m))
    }
}

/// Figment's wording, minus Rust type names and doubled backticks.
fn kind_message(kind: &Kind) -> String {
    match kind {
        Kind::UnknownVariant(v, expected) => {
            format!(
                "unknown value `{v}`; expected one of: {}",
                expected.join(", ")
            )
        }
        Kind::InvalidType(actual, expected) => {
            let expected = match expected.as_str() {
                "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number",
                "a boolean" | "bool" => "true or false",
                e => e,
            };
            format!("found {actual}, expected {expected}")
        }
        kind => kind.to_string(),
    }
}

/// `admin_listen`: unset = the built-in default, `off` = no admin listener.
/// Returns the address and whether it is the default.
fn admin_listen(cx: &Cx, raw: Option<&str>) -> Result<(Option<SocketAddr>, bool), ConfigError> {
    match raw.map(str::trim) {
        None => Ok((Some(DEFAULT_ADMIN_LISTEN), true)),
        Some(s) if s.eq_ignore_ascii_case(ADMIN_OFF) => Ok((None, false)),
        Some(s) => match s.parse() {
            Ok(a) => Ok((Some(a), false)),
            Err(_) => Err(cx.invalid(
                "admin_listen",
                format!(
                    "`{s}` is neither a socket address (IP:PORT, e.g. 127.0.0.1:9464) nor `off`"
                ),
            )),
        },
    }
}

/// Extracts and validates the whole config.
pub(super) fn build(fig: &Figment) -> Result<Config, ConfigError> {
    let cx = Cx::new(fig);
    let raw: RawConfig = fig.extract_lossy().map_err(|e| cx.figment_error(e))?;
    let listen = cx.addr("listen", &raw.listen)?;
    let (admin_listen, admin_listen_default) = admin_listen(&cx, raw.admin_listen.as_deref())?;
    // Two port-0 listeners get different ports; anything else would clash.
    if admin_listen == Some(listen) && listen.port() != 0 {
        let message = format!("{listen} is also the proxy's listen address");
        return Err(if admin_listen_default {
            ConfigError::Invalid {
                key: "admin_listen".into(),
                origin: "built-in default".into(),
                message: format!("{message}; set admin_listen to another address or \"off\""),
            }
        } else {
            cx.invalid("admin_listen", message)
        });
    }
    let s = &raw.server;
    let server = ServerConfig {
        header_read_timeout: cx.positive("server.header_read_timeout", &s.header_read_timeout)?,
        max_header_bytes: cx.size("server.max_header_bytes", &s.max_header_bytes)?,
        max_headers: cx.max_headers("server.max_headers", s.max_headers)?,
        max_connections: cx.count("server.max_connections", s.max_connections)?,
        shutdown_grace: cx.duration("server.shutdown_grace", &s.shutdown_grace)?,
        threads: cx.threads("server.threads", s.threads)?,
    };
    let tls = raw.tls.as_ref().map(|t| tls(&cx, "tls", t)).transpose()?;
    let admin = admin(&cx, &raw.admin, admin_listen)?;
    let upstream = upstream(&cx, &raw.upstream)?;
    let routes = routes(&cx, &raw.routes, upstream.drain_timeout)?;
    let live = live(&cx, &raw.live)?;
    let slo = slo::settings(&cx, &raw.slo, raw.alerts.as_ref(), &routes, &live)?;
    Ok(Config {
        listen,
        admin_listen,
        admin_listen_default,
        watch_config: raw.watch_config,
        server,
        tls,
        admin,
        upstream,
        routes,
        sniff: SniffConfig {
            max_body_bytes: cx.size("sniff.max_body_bytes", &raw.sniff.max_body_bytes)?,
        },
        meter: MeterConfig {
            max_frame_bytes: cx.size("meter.max_frame_bytes", &raw.meter.max_frame_bytes)?,
            tokenizer: raw.meter.tokenizer,
        },
        tenant: tenant(&cx, &raw.tenant)?,
        telemetry: telemetry(&cx, &raw.telemetry, live, slo)?,
    })
}

/// A readable file named at `key`.
fn file(cx: &Cx, key: &str, p: &str) -> Result<PathBuf, ConfigError> {
    let path = PathBuf::from(p.trim());
    if p.trim().is_empty() || !path.is_file() {
        return Err(cx.invalid(key, format!("`{p}` is not a readable file")));
    }
    Ok(path)
}

/// `[tls]` / `[admin.tls]`: the files must exist here; their content is
/// checked when the listener loads them (start-up and every reload).
fn tls(cx: &Cx, at: &str, t: &RawTls) -> Result<TlsConfig, ConfigError> {
    let (cert, key) = match (&t.cert, &t.key) {
        (Some(c), Some(k)) => (
            file(cx, &format!("{at}.cert"), c)?,
            file(cx, &format!("{at}.key"), k)?,
        ),
        (None, _) => {
            return Err(cx.invalid(
                &format!("{at}.cert"),
                "must be set (a PEM certificate chain) when TLS is configured",
            ));
        }
        (_, None) => {
            return Err(cx.invalid(
                &format!("{at}.key"),
                "must be set (the PEM private key of the certificate) when TLS is configured",
            ));
        }
    };
    let mut sni = Vec::new();
    for (i, e) in t.sni.iter().enumerate() {
        let name = e.name.trim().trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() || name.contains('*') {
            return Err(cx.invalid(
                &format!("{at}.sni.{i}.name"),
                "must be one exact DNS name (wildcards are not supported)",
            ));
        }
        sni.push(SniCert {
            name,
            cert: file(cx, &format!("{at}.sni.{i}.cert"), &e.cert)?,
            key: file(cx, &format!("{at}.sni.{i}.key"), &e.key)?,
        });
    }
    let client_ca = t
        .client_ca
        .as_deref()
        .map(|p| file(cx, &format!("{at}.client_ca"), p))
        .transpose()?;
    let client_auth = match (t.client_auth.as_deref().map(str::trim), &client_ca) {
        (None | Some("required"), Some(_)) => ClientAuth::Required,
        (Some("optional"), Some(_)) => ClientAuth::Optional,
        (None, None) => ClientAuth::Off,
        (Some("required" | "optional"), None) => {
            return Err(cx.invalid(
                &format!("{at}.client_auth"),
                format!(
                    "needs {at}.client_ca, the CA bundle client certificates are checked against"
                ),
            ));
        }
        (Some(other), _) => {
            return Err(cx.invalid(
                &format!("{at}.client_auth"),
                format!("`{other}` is neither `required` nor `optional`"),
            ));
        }
    };
    Ok(TlsConfig {
        cert,
        key,
        sni,
        client_ca,
        client_auth,
    })
}

/// `[admin]`, and the refusal to expose an unprotected admin listener.
fn admin(cx: &Cx, a: &RawAdmin, listen: Option<SocketAddr>) -> Result<AdminConfig, ConfigError> {
    let token = match (&a.token, &a.token_file) {
        (Some(_), Some(_)) => {
            return Err(cx.invalid(
                "admin.token_file",
                "set admin.token or admin.token_file, not both",
            ));
        }
        (Some(t), None) => Some(t.trim().to_owned()),
        (None, Some(p)) => {
            let path = file(cx, "admin.token_file", p)?;
            let text = std::fs::read_to_string(&path).map_err(|e| {
                cx.invalid("admin.token_file", format!("`{p}` cannot be read: {e}"))
            })?;
            Some(text.trim().to_owned())
        }
        (None, None) => None,
    };
    if token
        .as_deref()
        .is_some_and(|t| t.is_empty() || t.len() < 16)
    {
        let key = if a.token.is_some() {
            "admin.token"
        } else {
            "admin.token_file"
        };
        return Err(cx.invalid(key, "the token must be at least 16 characters long"));
    }
    if token
        .as_deref()
        .is_some_and(|t| http::HeaderValue::from_str(t).is_err())
    {
        let key = if a.token.is_some() {
            "admin.token"
        } else {
            "admin.token_file"
        };
        return Err(cx.invalid(key, "the token must be printable ASCII"));
    }
    let cfg = AdminConfig {
        token,
        tls: a
            .tls
            .as_ref()
            .map(|t| tls(cx, "admin.tls", t))
            .transpose()?,
        open_probes: a.open_probes,
        allow_unprotected: a.allow_unprotected,
    };
    if let Some(addr) = listen {
        if !addr.ip().is_loopback() && !cfg.protected() && !cfg.allow_unprotected {
            return Err(cx.invalid(
                "admin_listen",
                format!(
                    "{addr} is reachable beyond this machine, and the admin listener \
                     (/config, /metrics, the dashboard) has no protection; set \
                     admin.token (or admin.token_file), or admin.tls with client_ca, \
                     or bind it to 127.0.0.1; to expose it anyway set \
                     admin.allow_unprotected = true \
                     (TOKENTAP_ADMIN__ALLOW_UNPROTECTED=true)"
                ),
            ));
        }
    }
    Ok(cfg)
}

fn upstream(cx: &Cx, u: &RawUpstream) -> Result<UpstreamConfig, ConfigError> {
    let ca_file = match &u.ca_file {
        Some(p) if !PathBuf::from(p).is_file() => {
            return Err(cx.invalid("upstream.ca_file", format!("`{p}` is not a readable file")));
        }
        p => p.as_ref().map(PathBuf::from),
    };
    let opt =
        |path: &str, q: &Option<Quantity>| q.as_ref().map(|q| cx.positive(path, q)).transpose();
    Ok(UpstreamConfig {
        connect_timeout: cx.positive("upstream.connect_timeout", &u.connect_timeout)?,
        idle_timeout: opt("upstream.idle_timeout", &u.idle_timeout)?,
        total_timeout: opt("upstream.total_timeout", &u.total_timeout)?,
        ca_file,
        pool_idle_timeout: cx.duration("upstream.pool_idle_timeout", &u.pool_idle_timeout)?,
        pool_max_idle_per_host: u.pool_max_idle_per_host,
        connect_retries: connect_retries(cx, u.connect_retries)?,
        connect_retry_backoff: cx
            .positive("upstream.connect_retry_backoff", &u.connect_retry_backoff)?,
        drain_timeout: cx.positive("upstream.drain_timeout", &u.drain_timeout)?,
        drain_max_bytes: cx.size("upstream.drain_max_bytes", &u.drain_max_bytes)?,
        max_drains: cx.count("upstream.max_drains", u.max_drains)?,
    })
}

/// Most connect retries accepted: with the doubling backoff (capped at
/// `MAX_CONNECT_BACKOFF` in `upstream`) more would only hide an outage.
const MAX_CONNECT_RETRIES: u32 = 10;

/// Most serving threads `server.threads` may ask for.
const MAX_THREADS: usize = 1024;

fn connect_retries(cx: &Cx, n: u32) -> Result<u32, ConfigError> {
    if n > MAX_CONNECT_RETRIES {
        return Err(cx.invalid(
            "upstream.connect_retries",
            format!("{n} is too many; at most {MAX_CONNECT_RETRIES}"),
        ));
    }
    Ok(n)
}

fn routes(
    cx: &Cx,
    raw: &[RawRoute],
    drain_timeout: Duration,
) -> Result<Vec<RouteConfig>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::NoRoutes);
    }
    let mut names = HashSet::new();
    let mut matches = HashSet::new();
    let mut out = Vec::with_capacity(raw.len());
    for (i, r) in raw.iter().enumerate() {
        let at = |field: &str| format!("routes.{i}.{field}");
        let name_ok = !r.name.is_empty()
            && r.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !name_ok {
            return Err(cx.invalid(
                &at("name"),
                format!(
                    "`{}` must be non-empty letters, digits, `-`, `_` or `.`",
                    r.name
                ),
            ));
        }
        if !names.insert(r.name.as_str()) {
            return Err(cx.invalid(&at("name"), format!("duplicate route name `{}`", r.name)));
        }
        let prefix = parse::prefix(&r.prefix).map_err(|m| cx.invalid(&at("prefix"), m))?;
        let host = r
            .host
            .as_deref()
            .map(parse::host)
            .transpose()
            .map_err(|m| cx.invalid(&at("host"), m))?;
        if !matches.insert((prefix.clone(), host.clone())) {
            return Err(cx.invalid(&at("prefix"), format!("route `{}` matches the same prefix and host as an earlier route, so it would never be used", r.name)));
        }
        let upstream =
            parse::upstream_url(&r.upstream).map_err(|m| cx.invalid(&at("upstream"), m))?;
        let sigv4 = r
            .sigv4
            .as_ref()
            .map(|s| s.resolve(|k| std::env::var(k).ok()))
            .transpose()
            .map_err(|e| cx.invalid(&at("sigv4"), e.to_string()))?
            .map(std::sync::Arc::new);
        let on_client_disconnect = disconnect(cx, r, &at, drain_timeout)?;
        out.push(RouteConfig {
            name: r.name.clone(),
            prefix,
            host,
            upstream,
            provider: r.provider,
            inject_usage: r.inject_usage,
            sigv4,
            on_client_disconnect,
        });
    }
    Ok(out)
}

/// `on_client_disconnect` and its `drain_timeout` (route, else global).
fn disconnect(
    cx: &Cx,
    r: &RawRoute,
    at: &dyn Fn(&str) -> String,
    default_timeout: Duration,
) -> Result<OnClientDisconnect, ConfigError> {
    let timeout = r
        .drain_timeout
        .as_ref()
        .map(|q| cx.positive(&at("drain_timeout"), q))
        .transpose()?;
    match r.on_client_disconnect {
        DisconnectMode::Drain => Ok(OnClientDisconnect::Drain {
            timeout: timeout.unwrap_or(default_timeout),
        }),
        DisconnectMode::Cancel if timeout.is_some() => Err(cx.invalid(
            &at("drain_timeout"),
            "only applies with on_client_disconnect = \"drain\"",
        )),
        DisconnectMode::Cancel => Ok(OnClientDisconnect::Cancel),
    }
}

fn tenant(cx: &Cx, t: &RawTenant) -> Result<TenantConfig, ConfigError> {
    let mut sources = Vec::new();
    for name in &t.sources.0 {
        let s = match name.trim() {
            "header" => TenantSource::Header,
            "body" => TenantSource::Body,
            "api_key" => TenantSource::ApiKey,
            "client_cert" => TenantSource::ClientCert,
            other => {
                return Err(cx.invalid(
                    "tenant.sources",
                    format!(
                        "unknown tenant source `{other}`; expected `header`, `body`, `api_key` or `client_cert`"
                    ),
                ));
            }
        };
        if sources.contains(&s) {
            return Err(cx.invalid("tenant.sources", format!("`{name}` is listed twice")));
        }
        sources.push(s);
    }
    if t.salt.is_empty() {
        return Err(cx.invalid(
            "tenant.salt",
            "must not be empty; set a secret shared by all replicas",
        ));
    }
    Ok(TenantConfig {
        sources,
        header: cx.header("tenant.header", &t.header)?,
        salt: t.salt.clone(),
    })
}

/// Most buckets per series (`live.window / live.bucket`).
const MAX_LIVE_BUCKETS: u128 = 10_000;
/// Upper bounds that keep `[live]` memory in the tens of megabytes.
const MAX_LIVE_SERIES: usize = 10_000;
const MAX_LIVE_RECENT: usize = 10_000;

fn live(cx: &Cx, l: &RawLive) -> Result<LiveConfig, ConfigError> {
    let bucket = cx.positive("live.bucket", &l.bucket)?;
    if bucket < Duration::from_millis(100) {
        return Err(cx.invalid("live.bucket", "must be at least 100ms"));
    }
    let window = cx.positive("live.window", &l.window)?;
    if window < bucket {
        return Err(cx.invalid("live.window", "must be at least one `live.bucket`"));
    }
    if window.as_nanos().div_ceil(bucket.as_nanos()) > MAX_LIVE_BUCKETS {
        return Err(cx.invalid(
            "live.window",
            format!(
                "at most {MAX_LIVE_BUCKETS} buckets: raise `live.bucket` or shorten the window"
            ),
        ));
    }
    let max_series = cx.count("live.max_series", l.max_series)?;
    if max_series > MAX_LIVE_SERIES {
        return Err(cx.invalid("live.max_series", format!("at most {MAX_LIVE_SERIES}")));
    }
    if l.recent > MAX_LIVE_RECENT {
        return Err(cx.invalid("live.recent", format!("at most {MAX_LIVE_RECENT}")));
    }
    Ok(LiveConfig {
        window,
        bucket,
        max_series,
        recent: l.recent,
    })
}

/// The SDK reserves room for every allowed attribute set up front (per
/// instrument and reader), so the limit has a ceiling.
const MAX_SERIES_CEILING: usize = 20_000;

fn max_series(cx: &Cx, n: usize) -> Result<usize, ConfigError> {
    let n = cx.count("telemetry.max_series", n)?;
    if n > MAX_SERIES_CEILING {
        return Err(cx.invalid(
            "telemetry.max_series",
            format!(
                "must be at most {MAX_SERIES_CEILING} (memory for each is reserved at start-up)"
            ),
        ));
    }
    Ok(n)
}

fn telemetry(
    cx: &Cx,
    t: &RawTelemetry,
    live: LiveConfig,
    slo: SloSettings,
) -> Result<TelemetryConfig, ConfigError> {
    let otlp_endpoint = t
        .otlp_endpoint
        .as_deref()
        .map(|e| parse::endpoint_url(e).map_err(|m| cx.invalid("telemetry.otlp_endpoint", m)))
        .transpose()?;
    if t.service_name.trim().is_empty() {
        return Err(cx.invalid("telemetry.service_name", "must not be empty"));
    }
    let redact_headers = t
        .redact_headers
        .0
        .iter()
        .map(|h| cx.header("telemetry.redact_headers", h))
        .collect::<Result<_, _>>()?;
    for k in t.otlp_headers.keys() {
        cx.header("telemetry.otlp_headers", k)?;
    }
    let pairs = |m: &std::collections::BTreeMap<String, String>| {
        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    };
    let optional_file = |key: &str, p: &Option<String>| {
        p.as_deref()
            .map(|p| file(cx, &format!("telemetry.{key}"), p))
            .transpose()
    };
    let otlp_client_certificate =
        optional_file("otlp_client_certificate", &t.otlp_client_certificate)?;
    let otlp_client_key = optional_file("otlp_client_key", &t.otlp_client_key)?;
    if otlp_client_certificate.is_some() != otlp_client_key.is_some() {
        let missing = if otlp_client_key.is_none() {
            "otlp_client_key"
        } else {
            "otlp_client_certificate"
        };
        return Err(cx.invalid(
            &format!("telemetry.{missing}"),
            "the OTLP client certificate and key are set together",
        ));
    }
    Ok(TelemetryConfig {
        // No endpoint anywhere: export stays off (see CONFIG.md for why).
        otlp_enabled: t.otlp_enabled.unwrap_or(otlp_endpoint.is_some()),
        otlp_certificate: optional_file("otlp_certificate", &t.otlp_certificate)?,
        otlp_client_certificate,
        otlp_client_key,
        otlp_endpoint,
        otlp_protocol: t.otlp_protocol,
        otlp_headers: pairs(&t.otlp_headers),
        service_name: t.service_name.clone(),
        resource_attributes: pairs(&t.resource_attributes),
        metrics_export_interval: cx.positive(
            "telemetry.metrics_export_interval",
            &t.metrics_export_interval,
        )?,
        otlp_timeout: cx.positive("telemetry.otlp_timeout", &t.otlp_timeout)?,
        span_queue_size: cx.count("telemetry.span_queue_size", t.span_queue_size)?,
        max_models: cx.count("telemetry.max_models", t.max_models)?,
        max_tenants: cx.count("telemetry.max_tenants", t.max_tenants)?,
        max_series: max_series(cx, t.max_series)?,
        redact_headers,
        access_log: t.access_log,
        log_format: t.log_format,
        live,
        slo,
    })
}
