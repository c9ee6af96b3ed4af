//! Validation: the merged figment in, a typed `Config` (or an error naming
//! the key and the source that set it) out.

mod slo;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::error::Kind;
use figment::value::Value;
use figment::{Figment, Metadata, Source};

use super::DisconnectMode;
use super::raw::RawConfig;
use super::{
    ADMIN_OFF, Config, ConfigError, DEFAULT_ADMIN_LISTEN, RouteConfig, TelemetryConfig,
    UpstreamConfig, parse,
};
use super::{AdminConfig, ClientAuth, TlsConfig};
use super::{LiveConfig, SloSettings};
use crate::pricing::PriceOverride;

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
    pub(super) fn new(fig: &'a Figment) -> Self {
        Cx {
            fig,
            root: fig.find_value("").ok(),
        }
    }

    /// The source of the value at a dotted path (array elements by index);
    /// the deepest existing ancestor answers for a missing key.
    pub(super) fn origin(&self, path: &str) -> String {
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
    pub(super) fn figment_error(&self, e: figment::Error) -> ConfigError {
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

    /// A route's or an SLO's name: non-empty letters, digits, `-`, `_`, `.`.
    fn name(&self, path: &str, name: &str) -> Result<(), ConfigError> {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
        if !ok {
            let message = format!("`{name}` must be non-empty letters, digits, `-`, `_` or `.`");
            return Err(self.invalid(path, message));
        }
        Ok(())
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
    cx.max_headers("server.max_headers", s.max_headers)?;
    cx.threads("server.threads", s.threads)?;
    let server = s.clone();
    let tls = raw.tls.as_ref().map(|t| tls(&cx, "tls", t)).transpose()?;
    let admin = admin(&cx, &raw.admin, admin_listen)?;
    let upstream = upstream(&cx, &raw.upstream)?;
    let routes = routes(&cx, &raw.routes)?;
    let live = live(&cx, &raw.live)?;
    let slo = slo::settings(&cx, &raw.slo, raw.alerts.as_ref(), &routes, &live)?;
    super::state::check(&raw.state).map_err(|(key, message)| cx.invalid(key, message))?;
    super::compare::check(&raw.compare).map_err(|(key, message)| cx.invalid(key, message))?;
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
        sniff: raw.sniff.clone(),
        meter: raw.meter.clone(),
        websocket: raw.websocket.clone(),
        tenant: raw.tenant.clone(),
        sessions: raw.sessions.clone(),
        telemetry: TelemetryConfig {
            sessions: raw.sessions.limits(),
            compare: raw.compare.clone(),
            ..telemetry(&cx, &raw.telemetry, live, slo)?
        },
        state: raw.state.clone(),
        prices: prices(&cx, "prices", &raw.prices)?,
        prices_file: raw
            .prices_file
            .as_deref()
            .map(|p| file(&cx, "prices_file", p).map(|()| p.to_owned()))
            .transpose()?,
        // Filled in by `load_with_env` from the environment it reads.
        proxy_env: Default::default(),
    })
}

/// `[[prices]]` and `[[routes.prices]]`: every entry compiles (the file's
/// own entries are checked when it is read, at start-up and on reload).
fn prices(cx: &Cx, key: &str, list: &[PriceOverride]) -> Result<Vec<PriceOverride>, ConfigError> {
    for (i, p) in list.iter().enumerate() {
        crate::pricing::overrides::Override::compile(p)
            .map_err(|m| cx.invalid(&format!("{key}.{i}"), m))?;
    }
    Ok(list.to_vec())
}

/// A readable file named at `key`.
fn file(cx: &Cx, key: &str, p: &Path) -> Result<(), ConfigError> {
    if p.as_os_str().is_empty() || !p.is_file() {
        return Err(cx.invalid(key, format!("`{}` is not a readable file", p.display())));
    }
    Ok(())
}

/// `[tls]` / `[admin.tls]`: the files must exist here; their content is
/// checked when the listener loads them (start-up and every reload).
fn tls(cx: &Cx, at: &str, t: &TlsConfig) -> Result<TlsConfig, ConfigError> {
    file(cx, &format!("{at}.cert"), &t.cert)?;
    file(cx, &format!("{at}.key"), &t.key)?;
    let mut out = t.clone();
    for (i, e) in out.sni.iter_mut().enumerate() {
        let name = e.name.trim().trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() || name.contains('*') {
            return Err(cx.invalid(
                &format!("{at}.sni.{i}.name"),
                "must be one exact DNS name (wildcards are not supported)",
            ));
        }
        e.name = name;
        file(cx, &format!("{at}.sni.{i}.cert"), &e.cert)?;
        file(cx, &format!("{at}.sni.{i}.key"), &e.key)?;
    }
    match (&t.client_ca, t.client_auth) {
        (Some(ca), auth) => {
            file(cx, &format!("{at}.client_ca"), ca)?;
            if auth == ClientAuth::Off {
                out.client_auth = ClientAuth::Required;
            }
        }
        (None, ClientAuth::Off) => {}
        (None, _) => {
            return Err(cx.invalid(
                &format!("{at}.client_auth"),
                format!(
                    "needs {at}.client_ca, the CA bundle client certificates are checked against"
                ),
            ));
        }
    }
    Ok(out)
}

/// `[admin]`, and the refusal to expose an unprotected admin listener.
fn admin(cx: &Cx, a: &AdminConfig, listen: Option<SocketAddr>) -> Result<AdminConfig, ConfigError> {
    let mut out = a.clone();
    let key = match (&a.token, &a.token_file) {
        (Some(_), Some(_)) => {
            return Err(cx.invalid(
                "admin.token_file",
                "set admin.token or admin.token_file, not both",
            ));
        }
        (Some(t), None) => {
            out.token = Some(t.trim().to_owned());
            "admin.token"
        }
        (None, Some(p)) => {
            file(cx, "admin.token_file", p)?;
            let text = std::fs::read_to_string(p).map_err(|e| {
                cx.invalid(
                    "admin.token_file",
                    format!("`{}` cannot be read: {e}", p.display()),
                )
            })?;
            out.token = Some(text.trim().to_owned());
            "admin.token_file"
        }
        (None, None) => "admin.token",
    };
    if let Some(t) = &out.token {
        if t == super::units::REDACTED {
            return Err(cx.invalid(
                key,
                "`<redacted>` is the placeholder /config shows in place of the token; \
                 put the real token back (or use admin.token_file)",
            ));
        }
        if t.len() < 16 {
            return Err(cx.invalid(key, "the token must be at least 16 characters long"));
        }
        if http::HeaderValue::from_str(t).is_err() {
            return Err(cx.invalid(key, "the token must be printable ASCII"));
        }
    }
    out.tls = a
        .tls
        .as_ref()
        .map(|t| tls(cx, "admin.tls", t))
        .transpose()?;
    if let Some(addr) = listen
        && !addr.ip().is_loopback()
        && !out.protected()
        && !out.allow_unprotected
    {
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
    Ok(out)
}

fn upstream(cx: &Cx, u: &UpstreamConfig) -> Result<UpstreamConfig, ConfigError> {
    if let Some(p) = &u.ca_file
        && !p.is_file()
    {
        let message = format!("`{}` is not a readable file", p.display());
        return Err(cx.invalid("upstream.ca_file", message));
    }
    connect_retries(cx, u.connect_retries)?;
    if u.http2_max_streams_per_connection == 0 {
        return Err(cx.invalid(
            "upstream.http2_max_streams_per_connection",
            "must be at least 1",
        ));
    }
    if !(16_384..=0x7fff_ffff).contains(&u.http2_stream_window) {
        return Err(cx.invalid(
            "upstream.http2_stream_window",
            format!(
                "{} bytes: must be between 16KiB and 2GiB - 1 (RFC 9113 windows)",
                u.http2_stream_window
            ),
        ));
    }
    Ok(u.clone())
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

/// `[[routes]]`, each parsed by its fields' serde helpers: the checks
/// across routes (names, matches) and across keys of one route.
fn routes(cx: &Cx, routes: &[RouteConfig]) -> Result<Vec<RouteConfig>, ConfigError> {
    if routes.is_empty() {
        return Err(ConfigError::NoRoutes);
    }
    let mut names = HashSet::new();
    let mut matches = HashSet::new();
    for (i, r) in routes.iter().enumerate() {
        let at = |field: &str| format!("routes.{i}.{field}");
        cx.name(&at("name"), &r.name)?;
        if !names.insert(r.name.as_str()) {
            return Err(cx.invalid(&at("name"), format!("duplicate route name `{}`", r.name)));
        }
        if !matches.insert((r.prefix.as_str(), r.host.as_deref())) {
            return Err(cx.invalid(&at("prefix"), format!("route `{}` matches the same prefix and host as an earlier route, so it would never be used", r.name)));
        }
        if r.on_client_disconnect == DisconnectMode::Cancel && r.drain_timeout.is_some() {
            return Err(cx.invalid(
                &at("drain_timeout"),
                "only applies with on_client_disconnect = \"drain\"",
            ));
        }
        prices(cx, &at("prices"), &r.prices)?;
    }
    Ok(routes.to_vec())
}

/// Most buckets per series (`live.window / live.bucket`).
const MAX_LIVE_BUCKETS: u128 = 10_000;
/// Upper bounds that keep `[live]` memory in the tens of megabytes.
const MAX_LIVE_SERIES: usize = 10_000;
const MAX_LIVE_RECENT: usize = 10_000;

fn live(cx: &Cx, l: &LiveConfig) -> Result<LiveConfig, ConfigError> {
    if l.bucket < Duration::from_millis(100) {
        return Err(cx.invalid("live.bucket", "must be at least 100ms"));
    }
    if l.window < l.bucket {
        return Err(cx.invalid("live.window", "must be at least one `live.bucket`"));
    }
    if l.window.as_nanos().div_ceil(l.bucket.as_nanos()) > MAX_LIVE_BUCKETS {
        return Err(cx.invalid(
            "live.window",
            format!(
                "at most {MAX_LIVE_BUCKETS} buckets: raise `live.bucket` or shorten the window"
            ),
        ));
    }
    if l.max_series > MAX_LIVE_SERIES {
        return Err(cx.invalid("live.max_series", format!("at most {MAX_LIVE_SERIES}")));
    }
    if l.recent > MAX_LIVE_RECENT {
        return Err(cx.invalid("live.recent", format!("at most {MAX_LIVE_RECENT}")));
    }
    Ok(l.clone())
}

/// The SDK reserves room for every allowed attribute set up front (per
/// instrument and reader), so the limit has a ceiling.
const MAX_SERIES_CEILING: usize = 20_000;

fn telemetry(
    cx: &Cx,
    t: &TelemetryConfig,
    live: LiveConfig,
    slo: SloSettings,
) -> Result<TelemetryConfig, ConfigError> {
    if t.max_series > MAX_SERIES_CEILING {
        return Err(cx.invalid(
            "telemetry.max_series",
            format!(
                "must be at most {MAX_SERIES_CEILING} (memory for each is reserved at start-up)"
            ),
        ));
    }
    for (key, p) in [
        ("telemetry.otlp_certificate", &t.otlp_certificate),
        (
            "telemetry.otlp_client_certificate",
            &t.otlp_client_certificate,
        ),
        ("telemetry.otlp_client_key", &t.otlp_client_key),
    ] {
        if let Some(p) = p {
            file(cx, key, p)?;
        }
    }
    if t.otlp_client_certificate.is_some() != t.otlp_client_key.is_some() {
        let missing = if t.otlp_client_key.is_none() {
            "telemetry.otlp_client_key"
        } else {
            "telemetry.otlp_client_certificate"
        };
        return Err(cx.invalid(
            missing,
            "the OTLP client certificate and key are set together",
        ));
    }
    Ok(TelemetryConfig {
        // No endpoint anywhere: export stays off (see CONFIG.md for why);
        // it stays `None` then, so the start-up line can tell "off because
        // nothing is configured" from an explicit `false`.
        otlp_enabled: t
            .otlp_enabled
            .or_else(|| t.otlp_endpoint.is_some().then_some(true)),
        live,
        slo,
        ..t.clone()
    })
}
