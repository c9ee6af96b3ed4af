//! Egress through a forward proxy: a destination URI and the route's proxy
//! choice in, the proxy to use (or none) out; and the connector that opens
//! a TCP connection to the destination, or to the proxy (with a CONNECT
//! tunnel for `https://` destinations), for hyper-rustls to put TLS on.
//!
//! `NO_PROXY` matching is hyper-util's (`client::proxy::matcher`: host
//! suffixes, leading dots, IP addresses, CIDR ranges, `*`), plus what curl
//! and other clients also honour and it lacks: entries with a port
//! (`host:port`, only that port), and trailing dots. The CONNECT handshake
//! is our own: hyper-util's `Tunnel` folds every refusal but 407 into one
//! error without the proxy's status, which the client's error must name.

use std::error::Error as StdError;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use http::uri::Scheme;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tower::Service;

use crate::config::proxy::{ProxyEnv, ProxyUrl, RouteProxy};
use crate::error::BoxError;

/// The proxy a connection goes through; part of the pool key, so proxied
/// and direct connections (or two proxies' connections) never mix.
pub type Via = Option<Arc<ProxyUrl>>;

/// Which destinations go through which proxy: the environment's settings.
#[derive(Debug, Clone, Default)]
pub struct Egress {
    https: Option<Arc<ProxyUrl>>,
    http: Option<Arc<ProxyUrl>>,
    no_proxy: NoProxy,
}

impl Egress {
    /// The settings `env` holds.
    pub fn from_env(env: &ProxyEnv) -> Egress {
        Egress {
            https: env.https.as_ref().map(|p| p.url.clone()),
            http: env.http.as_ref().map(|p| p.url.clone()),
            no_proxy: env
                .no_proxy
                .as_ref()
                .map(|(_, list)| NoProxy::parse(list))
                .unwrap_or_default(),
        }
    }

    /// The proxy for a request to `dst` on a route whose choice is `choice`.
    pub fn via(&self, choice: &RouteProxy, dst: &Uri) -> Via {
        match choice {
            RouteProxy::Direct => None,
            RouteProxy::Via(url) => Some(url.clone()),
            RouteProxy::Env => {
                let proxy = match dst.scheme() {
                    Some(s) if *s == Scheme::HTTPS => self.https.as_ref()?,
                    Some(s) if *s == Scheme::HTTP => self.http.as_ref()?,
                    _ => return None,
                };
                (!self.no_proxy.contains(dst)).then(|| proxy.clone())
            }
        }
    }
}

/// The hosts `NO_PROXY` exempts from the proxy.
#[derive(Debug, Clone, Default)]
pub struct NoProxy {
    /// `*`: nothing is proxied.
    all: bool,
    /// Entries without a port (names, IP addresses, CIDR ranges), any port.
    hosts: Option<Arc<Matcher>>,
    /// `host:port` entries: that host (and its subdomains) on that port.
    ports: Vec<(String, u16)>,
}

impl NoProxy {
    /// Read a `NO_PROXY` list: entries separated by commas or blanks.
    pub fn parse(list: &str) -> NoProxy {
        let mut out = NoProxy::default();
        let mut hosts = Vec::new();
        for entry in list.split([',', ' ', '\t']).filter(|e| !e.is_empty()) {
            if entry == "*" {
                out.all = true;
                continue;
            }
            match with_port(entry) {
                Some((host, port)) => out.ports.push((normal_host(host), port)),
                None => hosts.push(entry.strip_suffix('.').unwrap_or(entry)),
            }
        }
        if !hosts.is_empty() {
            // The proxy given here is never used: the matcher only says
            // whether a destination is exempt.
            let matcher = Matcher::builder()
                .all("http://no-proxy.invalid")
                .no(hosts.join(","))
                .build();
            out.hosts = Some(Arc::new(matcher));
        }
        out
    }

    /// Whether requests to `dst` go straight to it.
    pub fn contains(&self, dst: &Uri) -> bool {
        if self.all {
            return true;
        }
        let Some(host) = dst.host() else { return false };
        let bare = host.strip_suffix('.').unwrap_or(host);
        if let Some(m) = &self.hosts {
            // The matcher reads the host and scheme only.
            let exempt = if bare.len() == host.len() {
                m.intercept(dst).is_none()
            } else {
                format!("http://{bare}/")
                    .parse::<Uri>()
                    .is_ok_and(|probe| m.intercept(&probe).is_none())
            };
            if exempt {
                return true;
            }
        }
        if self.ports.is_empty() {
            return false;
        }
        let port = dst.port_u16().unwrap_or(match dst.scheme_str() {
            Some("https") => 443,
            _ => 80,
        });
        let host = normal_host(bare);
        self.ports
            .iter()
            .any(|(h, p)| *p == port && host_matches(&host, h))
    }
}

/// `host:port` or `[v6]:port` split, when `entry` has a port.
fn with_port(entry: &str) -> Option<(&str, u16)> {
    let (host, port) = entry.rsplit_once(':')?;
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        // A bare IPv6 address (or CIDR range), no port.
        return None;
    }
    Some((host, port.parse().ok()?))
}

/// Lower case, without brackets, leading or trailing dots.
fn normal_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .trim_matches('.')
        .to_ascii_lowercase()
}

/// `host` is `entry` or a subdomain of it (names); the same address (IPs).
fn host_matches(host: &str, entry: &str) -> bool {
    if let (Ok(a), Ok(b)) = (host.parse::<IpAddr>(), entry.parse::<IpAddr>()) {
        return a == b;
    }
    host == entry
        || host
            .strip_suffix(entry)
            .is_some_and(|rest| rest.ends_with('.'))
}

/// Why going through the proxy failed. Shown to the client (502) and in
/// the access log; names the proxy without its credentials.
#[derive(Debug, thiserror::Error)]
pub enum ProxyFailure {
    /// The TCP connection to the proxy failed.
    #[error("proxy {proxy} unreachable")]
    Unreachable {
        /// The proxy, credentials redacted.
        proxy: String,
        /// Why connecting failed.
        #[source]
        source: BoxError,
    },
    /// The proxy answered the CONNECT with something other than 2xx.
    #[error("proxy {proxy} refused CONNECT {target}: {status} {reason}{hint}")]
    Refused {
        /// The proxy, credentials redacted.
        proxy: String,
        /// `host:port` asked for.
        target: String,
        /// The proxy's status code.
        status: u16,
        /// Its reason phrase.
        reason: String,
        /// What to check, for the statuses that have an obvious cause.
        hint: &'static str,
    },
    /// The proxy's answer to the CONNECT was not HTTP, too long, or cut off.
    #[error("proxy {proxy} gave no usable answer to CONNECT {target}: {what}")]
    Broken {
        /// The proxy, credentials redacted.
        proxy: String,
        /// `host:port` asked for.
        target: String,
        /// What was wrong.
        what: String,
    },
}

impl ProxyFailure {
    /// The proxy's status, for a refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            ProxyFailure::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A `ProxyFailure` anywhere in `err`'s chain (other than an unreachable
/// proxy, which is classified like an unreachable upstream).
pub fn refusal<'a>(err: &'a (dyn StdError + 'static)) -> Option<&'a ProxyFailure> {
    super::causes(err)
        .filter_map(|e| e.downcast_ref::<ProxyFailure>())
        .find(|f| !matches!(f, ProxyFailure::Unreachable { .. }))
}

/// Longest CONNECT answer head read.
const MAX_CONNECT_ANSWER: usize = 8 << 10;

/// Opens a TCP connection for a destination: straight, or through `via`.
/// `https://` destinations (and every destination when `tunnel_all`) get
/// a CONNECT tunnel; plain `http://` ones are connected to the proxy,
/// which the request then names in absolute form.
#[derive(Debug, Clone)]
pub struct Dial {
    /// TCP connector (its connect timeout applies to the proxy too).
    pub tcp: HttpConnector,
    /// The proxy, if any.
    pub via: Via,
    /// Tunnel `http://` destinations too: HTTP/2 with prior knowledge and
    /// upgrades need the bytes passed through untouched.
    pub tunnel_all: bool,
    /// Bound on the CONNECT exchange.
    pub timeout: Duration,
}

impl Dial {
    /// A dialer for any scheme (TLS, if any, goes on top): TCP_NODELAY,
    /// `timeout` on connecting and on the CONNECT exchange.
    pub fn new(via: Via, tunnel_all: bool, timeout: Duration) -> Dial {
        Dial {
            tcp: tcp_connector(timeout),
            via,
            tunnel_all,
            timeout,
        }
    }
}

/// The TCP connector under every outbound connection: any scheme (TLS
/// goes on top), TCP_NODELAY, `timeout` on connecting.
pub fn tcp_connector(timeout: Duration) -> HttpConnector {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(timeout));
    tcp
}

impl Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let Some(proxy) = self.via.clone() else {
            let direct = self.tcp.call(dst);
            return Box::pin(async move { direct.await.map_err(Into::into) });
        };
        let tunnel = self.tunnel_all || dst.scheme() != Some(&Scheme::HTTP);
        let proxy_uri = Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(proxy.authority().clone())
            .path_and_query("/")
            .build();
        let mut tcp = self.tcp.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let unreachable = |source: BoxError| ProxyFailure::Unreachable {
                proxy: proxy.redacted().to_owned(),
                source,
            };
            let io = tcp
                .call(proxy_uri.map_err(|e| unreachable(e.into()))?)
                .await
                .map_err(|e| unreachable(e.into()))?;
            if !tunnel {
                return Ok(io);
            }
            let mut stream = io.into_inner();
            let target = target(&dst)?;
            match tokio::time::timeout(timeout, connect(&mut stream, &target, &proxy)).await {
                Ok(done) => done?,
                Err(_) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "proxy {} did not answer CONNECT {target} within upstream.connect_timeout",
                            proxy.redacted()
                        ),
                    )
                    .into());
                }
            }
            Ok(TokioIo::new(stream))
        })
    }
}

/// `host:port` of `dst`, the port defaulting by scheme.
fn target(dst: &Uri) -> Result<String, BoxError> {
    let host = dst.host().ok_or("the destination has no host")?;
    let port = dst.port_u16().unwrap_or(match dst.scheme_str() {
        Some("http") => 80,
        _ => 443,
    });
    Ok(format!("{host}:{port}"))
}

/// Ask `proxy` (connected as `stream`) for a tunnel to `target`. Reads the
/// answer's head and nothing after it: the destination speaks first only
/// after tokentap did (TLS, HTTP), so bytes after the head are a broken
/// proxy.
async fn connect(stream: &mut TcpStream, target: &str, proxy: &ProxyUrl) -> Result<(), BoxError> {
    let mut ask = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n").into_bytes();
    if let Some(auth) = proxy.authorization() {
        ask.extend_from_slice(b"Proxy-Authorization: ");
        ask.extend_from_slice(auth.as_bytes());
        ask.extend_from_slice(b"\r\n");
    }
    ask.extend_from_slice(b"\r\n");
    stream.write_all(&ask).await?;
    let broken = |what: String| ProxyFailure::Broken {
        proxy: proxy.redacted().to_owned(),
        target: target.to_owned(),
        what,
    };
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(broken("the proxy closed the connection".into()).into());
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = answer.code.unwrap_or(0);
                if (200..300).contains(&status) {
                    if len < buf.len() {
                        return Err(broken("bytes after the answer's head".into()).into());
                    }
                    return Ok(());
                }
                return Err(ProxyFailure::Refused {
                    proxy: proxy.redacted().to_owned(),
                    target: target.to_owned(),
                    status,
                    reason: answer.reason.unwrap_or("").to_owned(),
                    hint: hint(status, proxy),
                }
                .into());
            }
            Ok(httparse::Status::Partial) if buf.len() > MAX_CONNECT_ANSWER => {
                return Err(broken("the answer's head is too long".into()).into());
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(broken(format!("not an HTTP answer ({e})")).into()),
        }
    }
}

/// A pointer at the usual cause of a refusal.
fn hint(status: u16, proxy: &ProxyUrl) -> &'static str {
    match status {
        407 if proxy.authorization().is_none() => {
            " (the proxy wants credentials: http://user:password@host:port)"
        }
        407 => " (the proxy rejected the credentials in its URL)",
        403 => " (the proxy does not allow this destination)",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exempt(list: &str, uri: &str) -> bool {
        NoProxy::parse(list).contains(&uri.parse().expect("uri"))
    }

    #[test]
    fn no_proxy_names_match_the_host_and_its_subdomains() {
        let list = "internal.corp, .example.com";
        assert!(exempt(list, "https://internal.corp/v1"));
        assert!(exempt(list, "https://api.internal.corp/"));
        assert!(exempt(list, "https://INTERNAL.corp/"), "case-insensitive");
        assert!(
            !exempt(list, "https://notinternal.corp/"),
            "not a suffix match"
        );
        assert!(
            exempt(list, "https://example.com/"),
            "leading dot: the domain too"
        );
        assert!(exempt(list, "https://a.b.example.com:8443/"), "any port");
        assert!(!exempt(list, "https://example.com.evil/"));
        assert!(!exempt("", "https://example.com/"));
    }

    #[test]
    fn no_proxy_ignores_trailing_dots_on_both_sides() {
        assert!(exempt("example.com.", "https://api.example.com/"));
        assert!(exempt("example.com", "https://api.example.com./"));
    }

    #[test]
    fn no_proxy_matches_addresses_and_cidr_ranges() {
        let list = "10.0.0.0/8,192.168.1.7,::1,fd00::/8";
        assert!(exempt(list, "http://10.20.30.40:8000/"));
        assert!(!exempt(list, "http://11.0.0.1/"));
        assert!(exempt(list, "http://192.168.1.7/"));
        assert!(!exempt(list, "http://192.168.1.8/"));
        assert!(exempt(list, "http://[::1]:9000/"));
        assert!(exempt(list, "http://[fd12::5]/"));
        assert!(!exempt(list, "http://[fe80::1]/"));
    }

    #[test]
    fn no_proxy_entries_with_a_port_match_only_that_port() {
        let list = "api.corp:8443 127.0.0.1:9000,[::1]:7000";
        assert!(exempt(list, "https://api.corp:8443/"));
        assert!(exempt(list, "https://eu.api.corp:8443/"), "subdomains too");
        assert!(!exempt(list, "https://api.corp/"), "443 is another port");
        assert!(exempt(list, "http://127.0.0.1:9000/"));
        assert!(!exempt(list, "http://127.0.0.1:9001/"));
        assert!(exempt(list, "http://[::1]:7000/"));
        assert!(!exempt(list, "http://[::1]:7001/"));
        assert!(exempt("api.corp:443", "https://api.corp/"), "default port");
        assert!(exempt("api.corp:80", "http://api.corp/"));
    }

    #[test]
    fn a_star_exempts_everything() {
        assert!(exempt("*", "https://anything.example/"));
        assert!(exempt("internal, *", "http://10.1.1.1/"));
    }

    fn env(https: Option<&str>, http: Option<&str>, no: Option<&str>) -> Egress {
        let mut vars = Vec::new();
        for (k, v) in [
            ("HTTPS_PROXY", https),
            ("HTTP_PROXY", http),
            ("NO_PROXY", no),
        ] {
            if let Some(v) = v {
                vars.push((k.to_owned(), v.to_owned()));
            }
        }
        Egress::from_env(&ProxyEnv::from_vars(&vars).expect("valid"))
    }

    #[test]
    fn the_scheme_picks_the_proxy_and_a_route_choice_wins() {
        let e = env(Some("http://sp:1"), Some("http://p:2"), Some("skip.me"));
        let shown = |v: Via| v.map(|p| p.redacted().to_owned());
        let https: Uri = "https://api.example/".parse().expect("uri");
        let http: Uri = "http://api.example/".parse().expect("uri");
        let skipped: Uri = "https://skip.me/".parse().expect("uri");
        assert_eq!(
            shown(e.via(&RouteProxy::Env, &https)).as_deref(),
            Some("http://sp:1")
        );
        assert_eq!(
            shown(e.via(&RouteProxy::Env, &http)).as_deref(),
            Some("http://p:2")
        );
        assert_eq!(e.via(&RouteProxy::Env, &skipped), None, "NO_PROXY");
        assert_eq!(e.via(&RouteProxy::Direct, &https), None, "\"none\" wins");
        let own = RouteProxy::parse("http://own:3").expect("valid");
        assert_eq!(
            shown(e.via(&own, &skipped)).as_deref(),
            Some("http://own:3"),
            "an explicit proxy wins over NO_PROXY"
        );
        assert_eq!(env(None, None, None).via(&RouteProxy::Env, &https), None);
        let only_http = env(None, Some("http://p:2"), None);
        assert_eq!(only_http.via(&RouteProxy::Env, &https), None);
    }

    #[test]
    fn port_split_leaves_bare_ipv6_alone() {
        assert_eq!(with_port("h:80"), Some(("h", 80)));
        assert_eq!(with_port("[::1]:80"), Some(("[::1]", 80)));
        assert_eq!(with_port("::1"), None);
        assert_eq!(with_port("fd00::/8"), None);
        assert_eq!(with_port("h"), None);
    }

    #[tokio::test]
    async fn connect_reports_the_proxys_status() {
        use tokio::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut b = [0u8; 256];
            while !head.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut b).await.expect("read");
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&b[..n]);
            }
            s.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                .await
                .expect("write");
            String::from_utf8_lossy(&head).into_owned()
        });
        let proxy = ProxyUrl::parse(&format!("http://u:pw@{addr}")).expect("url");
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let err = connect(&mut stream, "api.example:443", &proxy)
            .await
            .expect_err("refused");
        let failure = err.downcast_ref::<ProxyFailure>().expect("a proxy failure");
        assert_eq!(failure.status(), Some(407));
        let text = failure.to_string();
        assert!(
            text.contains(&format!("proxy http://u:<redacted>@{addr}")),
            "{text}"
        );
        assert!(text.contains("407 Proxy Authentication Required"), "{text}");
        assert!(!text.contains("pw"), "{text}");
        let head = server.await.expect("server");
        assert!(
            head.starts_with("CONNECT api.example:443 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.contains("Proxy-Authorization: Basic dTpwdw==\r\n"),
            "{head}"
        );
    }
}
