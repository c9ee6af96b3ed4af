//! Routing and tenancy: a request head in, the route it belongs to, the
//! upstream URI to forward to, and the tenant it is billed to out.

use std::sync::Arc;
use std::time::Duration;

use http::uri::{PathAndQuery, Scheme};
use http::{HeaderMap, Uri};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::config::{
    OnClientDisconnect, RouteConfig, SessionSource, SessionsConfig, TenantConfig, TenantSource,
};

/// A configured route, prepared for matching. It derefs to its
/// [`RouteConfig`], so the request path reads every route key as
/// `route.key` (`route.provider`, `route.labels`, …) without a copy here.
#[derive(Debug)]
pub struct Route {
    /// The route as configured.
    config: RouteConfig,
    /// Route name (`tokentap.route`), shared with every request's facts.
    pub name: Arc<str>,
    /// Path prefix without a trailing slash (empty for `/`).
    match_prefix: String,
    scheme: Scheme,
    authority: http::uri::Authority,
    /// Upstream base path without a trailing slash (may be empty).
    base_path: String,
    /// Cancel or drain the upstream when the client goes away (the
    /// route's `on_client_disconnect` with its drain bound resolved).
    pub disconnect: OnClientDisconnect,
    /// `server.address` for telemetry.
    pub server_address: Arc<str>,
    /// `server.port` for telemetry.
    pub server_port: u16,
}

impl std::ops::Deref for Route {
    type Target = RouteConfig;

    fn deref(&self) -> &RouteConfig {
        &self.config
    }
}

/// Request heads in, routes out; first match in configured order wins.
#[derive(Debug)]
pub struct Router {
    routes: Vec<Route>,
}

impl Router {
    /// Prepare the configured routes; `drain_timeout` is the drain bound
    /// of a route that sets none (`upstream.drain_timeout`).
    pub fn new(configs: &[RouteConfig], drain_timeout: Duration) -> Router {
        let routes = configs
            .iter()
            .map(|cfg| Route::new(cfg, drain_timeout))
            .collect();
        Router { routes }
    }

    /// The route for a request's `Host` (without port) and path.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<&Route> {
        self.routes.iter().find(|r| r.matches(host, path))
    }
}

impl Route {
    fn new(cfg: &RouteConfig, drain_timeout: Duration) -> Route {
        let scheme = cfg.upstream.scheme().cloned().unwrap_or(Scheme::HTTP);
        let authority = cfg
            .upstream
            .authority()
            .cloned()
            .unwrap_or_else(|| http::uri::Authority::from_static("localhost"));
        let default_port = if scheme == Scheme::HTTPS { 443 } else { 80 };
        Route {
            name: Arc::from(cfg.name.as_str()),
            match_prefix: cfg.prefix.trim_end_matches('/').to_owned(),
            server_address: Arc::from(authority.host()),
            server_port: authority.port_u16().unwrap_or(default_port),
            scheme,
            authority,
            base_path: cfg.upstream.path().trim_end_matches('/').to_owned(),
            disconnect: cfg.disconnect(drain_timeout),
            config: cfg.clone(),
        }
    }

    fn matches(&self, host: Option<&str>, path: &str) -> bool {
        // `host` is stored lowercase (`config::units::host`).
        if let Some(want) = &self.host {
            match host {
                Some(h) if h.eq_ignore_ascii_case(want) => {}
                _ => return false,
            }
        }
        self.strip(path).is_some()
    }

    /// The path after the route prefix, if the prefix matches on a segment
    /// boundary (`/openai` matches `/openai` and `/openai/v1`, not `/openaix`).
    pub fn strip<'p>(&self, path: &'p str) -> Option<&'p str> {
        let rest = path.strip_prefix(self.match_prefix.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }

    /// The upstream URI for a client request URI: base path + the request
    /// path with the route prefix stripped, query kept verbatim.
    pub fn upstream_uri(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let path = self.strip(uri.path()).unwrap_or(uri.path());
        let mut pq = String::with_capacity(self.base_path.len() + uri.path().len() + 32);
        pq.push_str(&self.base_path);
        if path.is_empty() {
            pq.push('/');
        } else {
            pq.push_str(path);
        }
        if let Some(q) = uri.query() {
            pq.push('?');
            pq.push_str(q);
        }
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(PathAndQuery::try_from(pq)?)
            .build()
    }
}

/// Headers that carry API keys, in the order they are tried for
/// `TenantSource::ApiKey`.
const KEY_HEADERS: [&str; 4] = ["authorization", "x-api-key", "api-key", "x-goog-api-key"];

/// Resolve the tenant from the configured sources, in order.
/// `body_user` is the sniffed end-user field of the request body.
pub fn resolve_tenant(
    cfg: &TenantConfig,
    headers: &HeaderMap,
    body_user: Option<&str>,
) -> Option<String> {
    resolve_tenant_with_cert(cfg, headers, body_user, None)
}

/// [`resolve_tenant`] with the subject of the connection's verified client
/// certificate, for the `client_cert` source.
pub fn resolve_tenant_with_cert(
    cfg: &TenantConfig,
    headers: &HeaderMap,
    body_user: Option<&str>,
    client_cert: Option<&str>,
) -> Option<String> {
    cfg.sources.iter().find_map(|source| match source {
        TenantSource::ClientCert => client_cert.map(str::to_owned),
        TenantSource::Header => headers
            .get(&cfg.header)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned),
        TenantSource::Body => body_user.filter(|u| !u.is_empty()).map(str::to_owned),
        TenantSource::ApiKey => api_key(headers).map(|key| key_hash(&cfg.salt, key)),
    })
}

fn api_key(headers: &HeaderMap) -> Option<&[u8]> {
    KEY_HEADERS.iter().find_map(|name| {
        let value = headers.get(*name)?.as_bytes();
        let key = match value.get(..7) {
            Some(p) if p.eq_ignore_ascii_case(b"bearer ") => &value[7..],
            _ => value,
        };
        let key = key.trim_ascii();
        (!key.is_empty()).then_some(key)
    })
}

/// The headers coding agents send their session id in, in the order
/// `SessionSource::Agents` tries them: Claude Code, Codex (two), OpenCode,
/// LiteLLM.
pub const AGENT_SESSION_HEADERS: [&str; 5] = [
    "x-claude-code-session-id",
    "session_id",
    "conversation_id",
    "x-session-affinity",
    "x-litellm-session-id",
];

/// Resolve the agent session id from the configured sources, in order:
/// the first that yields a valid id (see [`session_id`]) wins.
/// `body_session` is the sniffed `sessions.body_field` of the request body.
pub fn resolve_session(
    cfg: &SessionsConfig,
    headers: &HeaderMap,
    body_session: Option<&str>,
) -> Option<Arc<str>> {
    let max = cfg.max_id_length;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| session_id(v.as_bytes(), max))
    };
    cfg.sources.iter().find_map(|source| match source {
        SessionSource::Header => header(cfg.header.as_str()),
        SessionSource::Body => body_session.and_then(|v| session_id(v.as_bytes(), max)),
        SessionSource::Agents => AGENT_SESSION_HEADERS.iter().find_map(|h| header(h)),
    })
}

/// A session id as kept: surrounding whitespace trimmed; `None` when empty
/// or when any byte is not printable ASCII (space to `~`), so nothing a
/// terminal or log reader would interpret gets through. An id longer than
/// `max` bytes becomes its first `max − 17` bytes, `~` and the first 16
/// hex digits of its SHA-256: deterministic (the same id gives the same
/// value on every replica) and still distinct from other long ids that
/// share the prefix.
pub fn session_id(raw: &[u8], max: usize) -> Option<Arc<str>> {
    let id = raw.trim_ascii();
    if id.is_empty() || !id.iter().all(|b| (b' '..=b'~').contains(b)) {
        return None;
    }
    // Printable ASCII is UTF-8.
    let text = std::str::from_utf8(id).ok()?;
    if text.len() <= max {
        return Some(Arc::from(text));
    }
    let keep = max.saturating_sub(17);
    let digest = Sha256::digest(id);
    let mut out = String::with_capacity(max);
    out.push_str(&text[..keep]);
    out.push('~');
    push_hex(&mut out, &digest[..8]);
    Some(Arc::from(out))
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
    }
}

/// How many hashed API keys each serving thread remembers (then it starts
/// over): a key's SHA-256 costs ~4k instructions, a lookup ~0.3k.
const KEY_CACHE_ENTRIES: usize = 1024;

thread_local! {
    /// Tenants of the API keys this thread saw last, by a SipHash of
    /// (salt, key) under a random per-thread key: no key is stored, and
    /// collisions cannot be chosen from outside (64 bits; for 1,024 keys
    /// about one chance in 10^13).
    static KEY_TENANTS: std::cell::RefCell<(std::hash::RandomState, FxHashMap<u64, String>)> =
        std::cell::RefCell::default();
}

/// `key-` + the first 12 hex digits of SHA-256(salt ‖ key): stable across
/// replicas, useless for recovering the key. Remembered per thread.
fn key_hash(salt: &str, key: &[u8]) -> String {
    use std::hash::BuildHasher;
    KEY_TENANTS.with(|cache| {
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return key_digest(salt, key);
        };
        let (state, tenants) = &mut *cache;
        let id = state.hash_one((salt, key));
        if let Some(tenant) = tenants.get(&id) {
            return tenant.clone();
        }
        let tenant = key_digest(salt, key);
        if tenants.len() >= KEY_CACHE_ENTRIES {
            tenants.clear();
        }
        tenants.insert(id, tenant.clone());
        tenant
    })
}

fn key_digest(salt: &str, key: &[u8]) -> String {
    let digest = Sha256::new()
        .chain_update(salt.as_bytes())
        .chain_update(key)
        .finalize();
    let mut out = String::with_capacity(16);
    out.push_str("key-");
    push_hex(&mut out, &digest[..6]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A route as the config file gives it (every other key at its default).
    fn route(prefix: &str, host: Option<&str>, upstream: &str) -> RouteConfig {
        let mut text = format!(
            "name = {:?}\nprefix = {prefix:?}\nupstream = {upstream:?}\n",
            prefix.trim_matches('/')
        );
        if let Some(host) = host {
            text.push_str(&format!("host = {host:?}\n"));
        }
        toml::from_str(&text).expect("test route")
    }

    #[test]
    fn prefix_matches_on_segment_boundary_and_host() {
        let router = Router::new(
            &[
                route("/openai", Some("api.internal"), "https://a.example"),
                route("/openai", None, "https://b.example"),
                route("/", None, "http://c.example:8000/base/"),
            ],
            Duration::from_secs(30),
        );
        let hit = |host, path| router.find(host, path).map(|r| r.name.to_string());
        assert_eq!(
            hit(Some("API.internal"), "/openai/v1"),
            Some("openai".into())
        );
        assert_eq!(hit(Some("other"), "/openai/v1"), Some("openai".into()));
        assert_eq!(
            router
                .find(Some("other"), "/openai")
                .map(|r| r.server_address.to_string()),
            Some("b.example".into())
        );
        assert_eq!(
            hit(None, "/openaix/v1"),
            Some("".into()),
            "no segment match falls to /"
        );
    }

    #[test]
    fn upstream_uri_strips_prefix_and_joins_base_path() {
        let router = Router::new(
            &[
                route("/openai/", None, "https://api.openai.com"),
                route("/", None, "http://127.0.0.1:9000/base/"),
            ],
            Duration::from_secs(30),
        );
        for (path, upstream, port) in [
            (
                "/openai/v1/chat/completions?x=1&y=%20",
                "https://api.openai.com/v1/chat/completions?x=1&y=%20",
                443,
            ),
            (
                "/v1/messages",
                "http://127.0.0.1:9000/base/v1/messages",
                9000,
            ),
            ("/openai", "https://api.openai.com/", 443),
        ] {
            let uri: Uri = path.parse().expect("uri");
            let r = router.find(None, uri.path()).expect("route");
            let got = r.upstream_uri(&uri).expect("uri").to_string();
            assert_eq!((got.as_str(), r.server_port), (upstream, port), "{path}");
        }
    }

    #[test]
    fn session_sources_in_order_and_every_agent_header() {
        let mut cfg = SessionsConfig::default();
        for name in AGENT_SESSION_HEADERS {
            let mut h = HeaderMap::new();
            h.insert(name, " s-1 ".parse().expect("hv"));
            assert_eq!(
                resolve_session(&cfg, &h, None).as_deref(),
                Some("s-1"),
                "default sources read {name}"
            );
        }
        let mut h = HeaderMap::new();
        h.insert("conversation_id", "codex-b".parse().expect("hv"));
        h.insert("x-claude-code-session-id", "claude-a".parse().expect("hv"));
        h.insert("x-session-id", "custom".parse().expect("hv"));
        assert_eq!(
            resolve_session(&cfg, &h, Some("from-body")).as_deref(),
            Some("claude-a"),
            "agents only by default, Claude Code's header first"
        );
        cfg.sources = vec![SessionSource::Body, SessionSource::Header];
        assert_eq!(
            resolve_session(&cfg, &h, Some("from-body")).as_deref(),
            Some("from-body")
        );
        assert_eq!(
            resolve_session(&cfg, &h, Some("bad\u{7f}")).as_deref(),
            Some("custom"),
            "an invalid id falls through to the next source"
        );
        cfg.sources.clear();
        assert_eq!(
            resolve_session(&cfg, &h, Some("b")),
            None,
            "no sources, no session"
        );
    }

    #[test]
    fn session_ids_are_printable_and_bounded_deterministically() {
        assert_eq!(session_id(b"  abc  ", 128).as_deref(), Some("abc"));
        assert_eq!(session_id(b"   ", 128), None);
        for bad in [&b"a\tb"[..], b"a\x1bb", "caf\u{e9}".as_bytes(), b"a\x00"] {
            assert_eq!(session_id(bad, 128), None, "{bad:?} is refused");
        }
        let exact = "x".repeat(32);
        assert_eq!(session_id(exact.as_bytes(), 32).as_deref(), Some(&*exact));
        let long_a = format!("{}a", "p".repeat(40));
        let long_b = format!("{}b", "p".repeat(40));
        let a = session_id(long_a.as_bytes(), 32).expect("shortened");
        let b = session_id(long_b.as_bytes(), 32).expect("shortened");
        assert_eq!(a.len(), 32, "{a}");
        assert!(
            a.starts_with(&"p".repeat(15)) && a.as_bytes()[15] == b'~',
            "{a}"
        );
        assert_ne!(a, b, "ids sharing a prefix stay apart");
        assert_eq!(
            session_id(long_a.as_bytes(), 32),
            Some(a),
            "the same id is shortened the same way"
        );
    }

    #[test]
    fn tenant_sources_in_order_and_key_is_hashed() {
        let mut cfg = TenantConfig {
            sources: vec![
                TenantSource::Header,
                TenantSource::Body,
                TenantSource::ApiKey,
            ],
            salt: "s".into(),
            ..TenantConfig::default()
        };
        let mut headers = HeaderMap::new();
        headers.insert("authorization", "Bearer sk-secret-123".parse().expect("hv"));
        assert_eq!(
            resolve_tenant(&cfg, &headers, Some("alice")).as_deref(),
            Some("alice")
        );
        let hashed = resolve_tenant(&cfg, &headers, None).expect("key tenant");
        // `key-` and the first 6 bytes of SHA-256("s" ‖ "sk-secret-123"), in hex.
        assert_eq!(hashed, "key-2839f5e75082");
        assert!(!hashed.contains("secret"));
        headers.insert("x-tenant-id", " team-a ".parse().expect("hv"));
        assert_eq!(
            resolve_tenant(&cfg, &headers, Some("alice")).as_deref(),
            Some("team-a")
        );
        // Same key, other header, same hash; another salt, another hash.
        let mut other = HeaderMap::new();
        other.insert("x-api-key", "sk-secret-123".parse().expect("hv"));
        cfg.sources = vec![TenantSource::ApiKey];
        assert_eq!(resolve_tenant(&cfg, &other, None), Some(hashed.clone()));
        cfg.salt = "t".into();
        assert_ne!(resolve_tenant(&cfg, &other, None), Some(hashed));
        // Remembered or not, a key's tenant is its digest.
        for i in 0..KEY_CACHE_ENTRIES + 10 {
            let key = format!("sk-{}", i % (KEY_CACHE_ENTRIES + 5));
            other.insert("x-api-key", key.parse().expect("hv"));
            assert_eq!(
                resolve_tenant(&cfg, &other, None),
                Some(key_digest("t", key.as_bytes()))
            );
        }
        assert_eq!(resolve_tenant(&cfg, &HeaderMap::new(), None), None);
    }
}
