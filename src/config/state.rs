//! `[state]`: where replicas share the counted-once ledger and the session
//! rollups (a Redis or Valkey URL), or the file a single instance keeps
//! them in across restarts; the raw keys in, checked settings out.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::units;

/// `[state]` (restart-only: the store is connected once at start-up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// The store, `redis://`, `rediss://` or `unix://` (unset = in-process
    /// state); a password in it is shown redacted.
    #[serde(
        serialize_with = "shown_url_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub url: Option<String>,
    /// File holding the store's password, instead of one in the URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub password_file: Option<PathBuf>,
    /// Prefix of every key tokentap writes, so deployments can share a store.
    pub key_prefix: String,
    /// Longest wait for one store round trip; past it the replica meters
    /// with its in-process state.
    #[serde(with = "units::positive")]
    pub timeout: Duration,
    /// How long a counted response, file or batch id is remembered on the
    /// store (providers keep stored responses about 30 days).
    #[serde(with = "units::positive")]
    pub ledger_expiry: Duration,
    /// Without a store: the file the ledger and sessions are written to on
    /// drain and read back at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathBuf>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            url: None,
            password_file: None,
            key_prefix: "tokentap:".into(),
            timeout: Duration::from_millis(250),
            ledger_expiry: Duration::from_secs(30 * 24 * 3600),
            path: None,
        }
    }
}

/// The URL schemes a store may have.
const SCHEMES: [&str; 3] = ["redis://", "rediss://", "unix://"];

/// `url` with the password (if any) replaced by `<redacted>`, for `/config`
/// and the logs.
pub fn shown_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:{}@{host}{tail}", units::REDACTED),
            None => url.to_owned(),
        },
        // `unix://` carries the password as a query parameter.
        None if tail.contains("pass=") || tail.contains("password=") => {
            let (path, _) = tail.split_once('?').unwrap_or((tail, ""));
            format!("{scheme}://{authority}{path}?pass={}", units::REDACTED)
        }
        None => url.to_owned(),
    }
}

fn shown_url_opt<S: Serializer>(url: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    match url {
        Some(u) => s.serialize_str(&shown_url(u)),
        None => s.serialize_none(),
    }
}

/// Why a `[state]` setting is refused: the key and the message.
pub(super) fn check(c: &StateConfig) -> Result<(), (&'static str, String)> {
    if let Some(url) = &c.url {
        if !SCHEMES.iter().any(|s| url.starts_with(s)) {
            return Err((
                "state.url",
                format!(
                    "`{}` is no store URL; expected redis://host:port, rediss://host:port \
                     (TLS) or unix:///path/to/socket",
                    shown_url(url)
                ),
            ));
        }
        if let Err(e) = redis::IntoConnectionInfo::into_connection_info(url.as_str()) {
            return Err((
                "state.url",
                format!("`{}` cannot be read: {e}", shown_url(url)),
            ));
        }
        if c.path.is_some() {
            return Err((
                "state.path",
                "set state.url (a shared store) or state.path (one instance's file), not both"
                    .into(),
            ));
        }
    } else if c.password_file.is_some() {
        return Err((
            "state.password_file",
            "is the password of state.url, which is not set".into(),
        ));
    }
    if let Some(p) = &c.password_file
        && !p.is_file()
    {
        return Err((
            "state.password_file",
            format!("`{}` is not a readable file", p.display()),
        ));
    }
    if c.key_prefix.len() > 128 || c.key_prefix.chars().any(char::is_whitespace) {
        return Err((
            "state.key_prefix",
            "must be at most 128 bytes without whitespace".into(),
        ));
    }
    if let Some(p) = &c.path
        && p.is_dir()
    {
        return Err((
            "state.path",
            format!("`{}` is a directory; name a file in it", p.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_url_is_redacted() {
        assert_eq!(
            shown_url("redis://:s3cret@cache:6379/0"),
            "redis://:<redacted>@cache:6379/0"
        );
        assert_eq!(
            shown_url("rediss://app:s3cret@cache:6380"),
            "rediss://app:<redacted>@cache:6380"
        );
        assert_eq!(shown_url("redis://cache:6379"), "redis://cache:6379");
        assert_eq!(
            shown_url("unix:///run/redis.sock?pass=s3cret"),
            "unix:///run/redis.sock?pass=<redacted>"
        );
    }

    #[test]
    fn a_url_of_another_scheme_or_shape_is_refused_naming_the_key() {
        let bad = |url: &str| {
            check(&StateConfig {
                url: Some(url.into()),
                ..StateConfig::default()
            })
            .err()
            .map(|(k, m)| format!("{k}: {m}"))
        };
        let e = bad("http://cache:6379").expect("http is refused");
        assert!(
            e.starts_with("state.url: `http://cache:6379` is no store URL"),
            "{e}"
        );
        let e = bad("redis://:pw@cache:notaport").expect("a bad port is refused");
        assert!(e.contains("cannot be read") && !e.contains("pw"), "{e}");
        assert_eq!(bad("redis://127.0.0.1:6379/0"), None);
        assert_eq!(bad("unix:///run/redis.sock"), None);
    }
}
