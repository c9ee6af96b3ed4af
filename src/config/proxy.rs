//! Forward (egress) proxies: a proxy URL's text in, its validated address
//! and `Proxy-Authorization` out; the `HTTPS_PROXY` family of environment
//! variables in, the settings every outbound client starts from out.

use std::sync::Arc;

use base64::Engine as _;
use http::HeaderValue;
use http::uri::Authority;
use percent_encoding::percent_decode_str;

/// A forward proxy: `http://[user[:password]@]host[:port]` (port 80 when
/// unset). Only plain-HTTP proxies are supported; TLS to the upstream goes
/// through the proxy's CONNECT tunnel. `Debug` and `Display` never show
/// the password.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProxyUrl {
    /// `host:port` to connect to.
    authority: Authority,
    /// `Basic …` from the URL's user part, percent-decoded.
    authorization: Option<HeaderValue>,
    /// The URL as shown: the password replaced by `<redacted>`.
    shown: String,
}

impl ProxyUrl {
    /// Parse and check a proxy URL. The error says what is wrong (never
    /// repeating the password); the caller names the key or variable.
    pub fn parse(text: &str) -> Result<ProxyUrl, String> {
        let text = text.trim();
        // A bare `host:port` means http, as curl reads it.
        let (scheme, rest) = match text.split_once("://") {
            Some((s, r)) => (s.to_ascii_lowercase(), r),
            None => ("http".to_owned(), text),
        };
        match scheme.as_str() {
            "http" => {}
            "https" => {
                return Err("https:// proxies (TLS to the proxy) are not supported; \
                     use the proxy's http:// address (TLS to the upstream still runs \
                     end to end inside the CONNECT tunnel)"
                    .into());
            }
            s if s.starts_with("socks") => {
                return Err(format!(
                    "{s}:// proxies are not supported; only http:// proxies (CONNECT) are"
                ));
            }
            s => return Err(format!("unsupported proxy scheme `{s}`; expected http://")),
        }
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let (userinfo, host_port) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, rest),
        };
        if host_port.is_empty() {
            return Err("the proxy URL has no host".into());
        }
        if host_port.contains(['/', '?', '#']) {
            return Err("a proxy URL has no path, query or fragment".into());
        }
        let mut authority: Authority = host_port
            .parse()
            .map_err(|_| format!("`{host_port}` is not a host[:port]"))?;
        let port_text = host_port.rsplit_once(':').map(|(_, p)| p);
        if port_text.is_some_and(|p| !p.contains(']') && p.parse::<u16>().is_err()) {
            return Err(format!("`{host_port}` is not a host[:port]"));
        }
        if authority.host().is_empty() {
            return Err("the proxy URL has no host".into());
        }
        if authority.port().is_none() {
            authority = format!("{}:80", authority.host())
                .parse()
                .map_err(|_| format!("`{host_port}` is not a host[:port]"))?;
        }
        let (authorization, shown) = match userinfo {
            None => (None, format!("http://{authority}")),
            Some(u) => {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                if password == super::units::REDACTED {
                    // Copied from `/config`: never send the placeholder.
                    return Err(format!(
                        "the password is `{password}` (as `/config` shows it): put the real one back"
                    ));
                }
                let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
                let pair = format!("{}:{}", decode(user), decode(password));
                let token = base64::engine::general_purpose::STANDARD.encode(pair);
                let mut value = HeaderValue::from_str(&format!("Basic {token}"))
                    .map_err(|_| "the proxy credentials do not fit a header".to_owned())?;
                value.set_sensitive(true);
                let shown = match u.split_once(':') {
                    Some(_) => format!("http://{user}:{}@{authority}", super::units::REDACTED),
                    None => format!("http://{user}@{authority}"),
                };
                (Some(value), shown)
            }
        };
        Ok(ProxyUrl {
            authority,
            authorization,
            shown,
        })
    }

    /// `host:port` to connect to.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The `Proxy-Authorization` value, when the URL carries credentials.
    pub fn authorization(&self) -> Option<&HeaderValue> {
        self.authorization.as_ref()
    }

    /// The URL with its password replaced by `<redacted>`.
    pub fn redacted(&self) -> &str {
        &self.shown
    }
}

impl std::fmt::Debug for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

impl std::fmt::Display for ProxyUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown)
    }
}

/// `routes[].proxy`: how a route's upstream connections leave.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RouteProxy {
    /// As the environment says (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
    /// `NO_PROXY`); the default.
    #[default]
    Env,
    /// Straight to the upstream, whatever the environment says (`"none"`).
    Direct,
    /// Through this proxy, whatever the environment says (`NO_PROXY` too).
    Via(Arc<ProxyUrl>),
}

impl RouteProxy {
    /// Read `routes[].proxy`: `"none"` or a proxy URL.
    pub fn parse(text: &str) -> Result<RouteProxy, String> {
        if text.trim().eq_ignore_ascii_case("none") {
            return Ok(RouteProxy::Direct);
        }
        ProxyUrl::parse(text).map(|u| RouteProxy::Via(Arc::new(u)))
    }

    /// As the environment says (`routes[].proxy` unset).
    pub fn is_env(&self) -> bool {
        *self == RouteProxy::Env
    }

    /// The file form, for `/config` (credentials redacted); `None` for `Env`.
    pub fn shown(&self) -> Option<String> {
        match self {
            RouteProxy::Env => None,
            RouteProxy::Direct => Some("none".into()),
            RouteProxy::Via(url) => Some(url.redacted().to_owned()),
        }
    }
}

/// One proxy variable that was set: its name as found and its proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvProxy {
    /// The variable it came from (`https_proxy`, `ALL_PROXY`, …).
    pub var: String,
    /// Its proxy.
    pub url: Arc<ProxyUrl>,
}

/// The proxy environment variables, read once at start-up: every outbound
/// client (upstreams, WebSocket upstreams, alert webhook, OTLP/HTTP export)
/// starts from these.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// For `https://` destinations: `https_proxy`, `HTTPS_PROXY`, else `ALL_PROXY`.
    pub https: Option<EnvProxy>,
    /// For `http://` destinations: `http_proxy`, `HTTP_PROXY`, else `ALL_PROXY`.
    pub http: Option<EnvProxy>,
    /// `no_proxy` / `NO_PROXY` as found (variable, value).
    pub no_proxy: Option<(String, String)>,
}

impl ProxyEnv {
    /// Read the variables from `env` (lower case first, as curl does; an
    /// empty value counts as unset). A set variable that does not hold a
    /// usable proxy is an error naming it: connecting straight to the
    /// provider instead would fail on a network that only lets the proxy
    /// out, with a far less clear message.
    pub fn from_vars(env: &[(String, String)]) -> Result<ProxyEnv, (String, String)> {
        let get = |name: &str| -> Option<(String, String)> {
            let lower = name.to_ascii_lowercase();
            [lower.as_str(), name].into_iter().find_map(|n| {
                env.iter()
                    .rev()
                    .find(|(k, v)| k == n && !v.trim().is_empty())
                    .map(|(k, v)| (k.clone(), v.clone()))
            })
        };
        let proxy = |name: &str| -> Result<Option<EnvProxy>, (String, String)> {
            let Some((var, value)) = get(name).or_else(|| get("ALL_PROXY")) else {
                return Ok(None);
            };
            match ProxyUrl::parse(&value) {
                Ok(url) => Ok(Some(EnvProxy {
                    var,
                    url: Arc::new(url),
                })),
                Err(message) => Err((var, message)),
            }
        };
        Ok(ProxyEnv {
            https: proxy("HTTPS_PROXY")?,
            http: proxy("HTTP_PROXY")?,
            no_proxy: get("NO_PROXY"),
        })
    }

    /// The variables of this process's environment (for clients built
    /// outside the configuration: the alert webhook).
    pub fn from_process() -> Result<ProxyEnv, (String, String)> {
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| k.to_ascii_lowercase().ends_with("_proxy"))
            .collect();
        ProxyEnv::from_vars(&env)
    }

    /// `/config`'s comment lines saying which proxies the environment set
    /// (credentials redacted); empty when none.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (what, p) in [("https://", &self.https), ("http://", &self.http)] {
            if let Some(p) = p {
                out.push_str(&format!(
                    "# egress proxy for {what} upstreams (from {}): {}\n",
                    p.var, p.url
                ));
            }
        }
        if let Some((var, value)) = &self.no_proxy
            && (self.https.is_some() || self.http.is_some())
        {
            out.push_str(&format!("# not proxied ({var}): {value}\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn proxy_urls_parse_with_default_port_and_decoded_credentials() {
        let p = ProxyUrl::parse("http://us%40er:p%3Ass@proxy.corp:3128/").expect("valid");
        assert_eq!(p.authority().as_str(), "proxy.corp:3128");
        let auth = p.authorization().expect("credentials");
        // base64("us@er:p:ss")
        assert_eq!(auth, "Basic dXNAZXI6cDpzcw==");
        assert!(auth.is_sensitive());
        assert_eq!(p.redacted(), "http://us%40er:<redacted>@proxy.corp:3128");
        assert!(
            !format!("{p:?}").contains("p%3Ass"),
            "Debug hides the password"
        );
        let bare = ProxyUrl::parse("proxy.corp").expect("bare host");
        assert_eq!(bare.authority().as_str(), "proxy.corp:80");
        assert!(bare.authorization().is_none());
        let v6 = ProxyUrl::parse("http://[::1]:8080").expect("v6");
        assert_eq!(v6.authority().as_str(), "[::1]:8080");
    }

    #[test]
    fn unsupported_proxies_say_so() {
        for (url, says) in [
            ("socks5://proxy:1080", "socks5:// proxies are not supported"),
            (
                "socks5h://proxy:1080",
                "socks5h:// proxies are not supported",
            ),
            ("https://proxy:443", "https:// proxies"),
            ("ftp://proxy", "unsupported proxy scheme `ftp`"),
            ("http://proxy:3128/path", "no path"),
            ("http://", "no host"),
            ("http://proxy:notaport", "not a host[:port]"),
        ] {
            let err = ProxyUrl::parse(url).expect_err(url);
            assert!(err.contains(says), "{url}: {err}");
        }
        assert_eq!(RouteProxy::parse("NONE"), Ok(RouteProxy::Direct));
        let err = ProxyUrl::parse("http://u:<redacted>@p:1").expect_err("placeholder");
        assert!(err.contains("put the real one back"), "{err}");
    }

    #[test]
    fn a_bad_route_proxy_names_the_key() {
        let toml = |proxy: &str| {
            format!(
                "[[routes]]\nname = \"r\"\nupstream = \"https://x.example\"\nproxy = \"{proxy}\"\n"
            )
        };
        let err = crate::config::from_toml(&toml("socks5://s:1080")).expect_err("socks");
        assert_eq!(err.key(), Some("routes[0].proxy"), "{err}");
        assert!(
            err.to_string()
                .contains("socks5:// proxies are not supported"),
            "{err}"
        );
        let ok = crate::config::from_toml(&toml("http://u:pw-x7q@p:3128")).expect("valid");
        let RouteProxy::Via(url) = &ok.routes[0].proxy else {
            panic!("an explicit proxy: {:?}", ok.routes[0].proxy)
        };
        assert_eq!(url.authority().as_str(), "p:3128");
        let shown = ok.redacted_toml();
        assert!(
            shown.contains(r#"proxy = "http://u:<redacted>@p:3128""#),
            "{shown}"
        );
        assert!(!shown.contains("pw-x7q"), "{shown}");
    }

    #[test]
    fn env_reads_lower_case_first_then_all_proxy() {
        let env = ProxyEnv::from_vars(&vars(&[
            ("HTTPS_PROXY", "http://upper:1"),
            ("https_proxy", "http://lower:2"),
            ("ALL_PROXY", "http://all:3"),
            ("NO_PROXY", "internal"),
            ("http_proxy", ""),
        ]))
        .expect("valid");
        let https = env.https.expect("https proxy");
        assert_eq!(
            (https.var.as_str(), https.url.redacted()),
            ("https_proxy", "http://lower:2")
        );
        let http = env.http.expect("ALL_PROXY fills in");
        assert_eq!(
            (http.var.as_str(), http.url.redacted()),
            ("ALL_PROXY", "http://all:3")
        );
        assert_eq!(env.no_proxy, Some(("NO_PROXY".into(), "internal".into())));
        assert_eq!(ProxyEnv::from_vars(&[]), Ok(ProxyEnv::default()));
        let (var, message) =
            ProxyEnv::from_vars(&vars(&[("HTTPS_PROXY", "socks5://s:1080")])).expect_err("socks");
        assert_eq!(var, "HTTPS_PROXY");
        assert!(message.contains("not supported"), "{message}");
    }

    #[test]
    fn describe_redacts_credentials() {
        let env = ProxyEnv::from_vars(&vars(&[
            ("HTTPS_PROXY", "http://u:secret@p:3128"),
            ("no_proxy", ".internal,10.0.0.0/8"),
        ]))
        .expect("valid");
        let text = env.describe();
        assert!(!text.contains("secret"), "{text}");
        assert!(
            text.contains("(from HTTPS_PROXY): http://u:<redacted>@p:3128"),
            "{text}"
        );
        assert!(text.contains("(no_proxy): .internal,10.0.0.0/8"), "{text}");
    }
}
