//! Value parsers: config strings in (durations, sizes, URLs, `k=v` lists),
//! typed values or a one-line reason out. No figment, no key names.

use std::time::Duration;

/// Parses `"250ms"`, `"5s"`, `"2m"`, `"1h30m"`; a bare number is refused
/// because `5` could mean seconds or milliseconds.
pub(super) fn duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration; write e.g. \"5s\"".into());
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(format!(
            "`{t}` has no unit; write e.g. \"{t}s\" or \"{t}ms\""
        ));
    }
    humantime::parse_duration(t).map_err(|e| {
        format!("`{t}` is not a duration ({e}); write e.g. \"250ms\", \"5s\", \"1h30m\"")
    })
}

/// Formats a duration so that [`duration`] reads it back, as the docs
/// write durations: one number in the largest unit that holds it whole
/// (`"24h"`, `"90s"`, `"2m"`, `"250ms"`); hours at most, never days.
pub(super) fn fmt_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    const UNITS: [(u128, &str); 6] = [
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    let nanos = d.as_nanos();
    let (size, unit) = UNITS
        .into_iter()
        .find(|(size, _)| nanos % size == 0)
        .unwrap_or((1, "ns"));
    format!("{}{unit}", nanos / size)
}

/// Parses `"8MiB"`, `"64KiB"`, `"1000"`, `"4 MB"`, `"1.5MiB"`: decimal
/// units (kB, MB, GB) are powers of 1000, binary ones (KiB, K, …) of 1024.
pub(super) fn size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let bad =
        || format!("`{t}` is not a size; write e.g. \"8MiB\", \"64KiB\" or a number of bytes");
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "k" | "kib" => 1 << 10,
        "mb" => 1000 * 1000,
        "m" | "mib" => 1 << 20,
        "gb" => 1000 * 1000 * 1000,
        "g" | "gib" => 1 << 30,
        _ => return Err(bad()),
    };
    if num.is_empty() {
        return Err(bad());
    }
    let bytes = if let Ok(n) = num.parse::<u64>() {
        n.checked_mul(mult)
    } else {
        let f = num.parse::<f64>().map_err(|_| bad())?;
        let b = (f * mult as f64).floor();
        (b.is_finite() && b <= u64::MAX as f64).then_some(b as u64)
    };
    bytes
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("`{t}` is too large"))
}

/// Formats a byte count with the largest binary unit that divides it.
pub(super) fn fmt_size(n: usize) -> String {
    const UNITS: [(usize, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    UNITS
        .iter()
        .find(|(m, _)| n >= *m && n % m == 0)
        .map_or_else(|| n.to_string(), |(m, u)| format!("{}{u}", n / m))
}

/// Checks an upstream base URL (http/https, a host, an optional base path,
/// no query, fragment or credentials) and drops a trailing `/` from the path.
pub(super) fn upstream_url(s: &str) -> Result<http::Uri, String> {
    let t = s.trim();
    if t.contains('#') {
        return Err(format!(
            "`{t}` has a fragment; give a base URL like \"https://api.openai.com\""
        ));
    }
    let uri: http::Uri = t
        .parse()
        .map_err(|e| format!("`{t}` is not a URL ({e}); give e.g. \"https://api.openai.com\""))?;
    let scheme = uri.scheme_str().unwrap_or("");
    if scheme != "http" && scheme != "https" {
        return Err(format!("`{t}` must start with http:// or https://"));
    }
    let Some(authority) = uri.authority() else {
        return Err(format!("`{t}` has no host"));
    };
    if authority.host().is_empty() {
        return Err(format!("`{t}` has no host"));
    }
    if authority.as_str().contains('@') {
        return Err(format!(
            "`{t}` carries credentials; clients send their own API keys through the proxy"
        ));
    }
    if uri.query().is_some() {
        return Err(format!(
            "`{t}` has a query string; only a base path is allowed"
        ));
    }
    let path = uri.path().trim_end_matches('/');
    let path = if path.is_empty() { "/" } else { path };
    http::Uri::builder()
        .scheme(scheme)
        .authority(authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|e| format!("`{t}`: {e}"))
}

/// Checks a collector endpoint: an http(s) URL with a host.
pub(super) fn endpoint_url(s: &str) -> Result<String, String> {
    let t = s.trim();
    let uri: http::Uri = t
        .parse()
        .map_err(|e| format!("`{t}` is not a URL ({e}); give e.g. \"http://localhost:4318\""))?;
    match (uri.scheme_str(), uri.host()) {
        (Some("http" | "https"), Some(h)) if !h.is_empty() => Ok(t.to_string()),
        _ => Err(format!(
            "`{t}` must be an http:// or https:// URL with a host"
        )),
    }
}

/// Checks a webhook URL: http(s), a host, no credentials (use a header)
/// and no fragment; path and query are kept.
pub(super) fn webhook_url(s: &str) -> Result<http::Uri, String> {
    // The URL itself may be a secret (a Slack webhook's path is): never echoed.
    let t = s.trim();
    if t.is_empty() {
        return Err(
            "required when [alerts] is set; give e.g. \"https://hooks.example.com/...\"".into(),
        );
    }
    if t.contains('#') {
        return Err("has a fragment; give the URL without `#...`".into());
    }
    let uri: http::Uri = t.parse().map_err(|e| format!("not a URL ({e})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err("must start with http:// or https://".into());
    }
    match uri.authority() {
        Some(a) if a.as_str().contains('@') => {
            Err("carries credentials; send them with [alerts.headers] (e.g. authorization)".into())
        }
        Some(a) if !a.host().is_empty() => Ok(uri),
        _ => Err("has no host".into()),
    }
}

/// Normalises a route prefix: must start with `/`; trailing slashes dropped.
pub(super) fn prefix(s: &str) -> Result<String, String> {
    if !s.starts_with('/') {
        return Err(format!("`{s}` must start with `/`"));
    }
    if s.contains(['?', '#']) || s.contains(char::is_whitespace) {
        return Err(format!(
            "`{s}` must be a plain path (no query, fragment or spaces)"
        ));
    }
    let trimmed = s.trim_end_matches('/');
    Ok(if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.into()
    })
}

/// Checks a `Host` to match: a hostname or IP, no port, lowercased.
pub(super) fn host(s: &str) -> Result<String, String> {
    let t = s.trim();
    let bare_v6 = t.starts_with('[') && t.ends_with(']');
    if t.is_empty() || t.contains(['/', '@', ' ']) || (t.contains(':') && !bare_v6) {
        return Err(format!(
            "`{s}` must be a host name without scheme, port or path"
        ));
    }
    Ok(t.to_ascii_lowercase())
}

/// Parses a header name (case-insensitive; stored lowercase).
pub(super) fn header_name(s: &str) -> Result<http::HeaderName, String> {
    http::HeaderName::from_bytes(s.trim().as_bytes())
        .map_err(|_| format!("`{s}` is not a valid HTTP header name"))
}

/// Parses the OTEL list form `k1=v1,k2=v2`, percent-decoding keys and values.
pub(super) fn kv_list(s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((k, v)) = entry.split_once('=') else {
            return Err(format!("entry `{entry}` is not key=value"));
        };
        let k = percent_decode(k.trim())?;
        if k.is_empty() {
            return Err(format!("entry `{entry}` has an empty key"));
        }
        out.push((k, percent_decode(v.trim())?));
    }
    Ok(out)
}

fn percent_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |j: usize| b.get(j).and_then(|c| (*c as char).to_digit(16));
        match (b[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{s}` does not decode to UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        let e = duration("5").expect_err("a bare number must be refused");
        assert!(e.contains("no unit"), "expected a unit hint, got {e}");
        assert!(duration("soon").is_err(), "`soon` is no duration");
        for d in [5400, 1, 0, 90, 86_400, 40 * 86_400].map(Duration::from_secs) {
            assert_eq!(duration(&fmt_duration(d)), Ok(d), "round trip of {d:?}");
        }
        for (d, shown) in [
            (Duration::from_secs(86_400), "24h"),
            (Duration::from_secs(7 * 86_400), "168h"),
            (Duration::from_secs(5400), "90m"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_micros(1500), "1500us"),
            (Duration::from_nanos(2_000_000_007), "2000000007ns"),
        ] {
            assert_eq!(fmt_duration(d), shown, "{d:?} as the docs write it");
            assert_eq!(duration(shown), Ok(d), "{shown} reads back");
        }
        let d = Duration::from_millis(1500);
        assert_eq!(duration(&fmt_duration(d)), Ok(d), "round trip of 1.5s");
    }

    #[test]
    fn config_sizes() {
        assert_eq!(size("8MiB"), Ok(8 << 20));
        assert_eq!(size("64KiB"), Ok(64 << 10));
        assert_eq!(size("1000"), Ok(1000));
        assert_eq!(size("4 MB"), Ok(4_000_000));
        assert_eq!(size("1.5KiB"), Ok(1536));
        assert!(size("MiB").is_err(), "a unit alone is no size");
        assert!(size("8 parsecs").is_err(), "unknown unit");
        assert!(size("99999999999GiB").is_err(), "overflow must be refused");
        for n in [0, 1000, 1 << 20, 3 << 30, 65536] {
            assert_eq!(size(&fmt_size(n)), Ok(n), "round trip of {n}");
        }
    }

    #[test]
    fn config_urls() {
        let u = upstream_url("https://api.openai.com/v1/").expect("valid");
        assert_eq!(u.to_string(), "https://api.openai.com/v1");
        let u = upstream_url("http://127.0.0.1:9000").expect("valid");
        assert_eq!(u.path(), "/");
        for bad in [
            "ftp://x.org",
            "api.openai.com",
            "https://x.org/?a=1",
            "https://x.org/#f",
            "https://u:p@x.org",
            "/v1",
        ] {
            assert!(upstream_url(bad).is_err(), "`{bad}` must be refused");
        }
    }

    #[test]
    fn config_prefixes_and_hosts() {
        assert_eq!(prefix("/openai/"), Ok("/openai".into()));
        assert_eq!(prefix("/"), Ok("/".into()));
        assert_eq!(prefix("//"), Ok("/".into()));
        assert!(prefix("openai").is_err(), "prefix without a leading slash");
        assert_eq!(host("API.Example.com"), Ok("api.example.com".into()));
        assert!(host("example.com:8080").is_err(), "host with a port");
    }

    #[test]
    fn config_kv_lists() {
        let kv = kv_list("api-key=a%20b, x=1=2 ,").expect("valid list");
        assert_eq!(
            kv,
            vec![("api-key".into(), "a b".into()), ("x".into(), "1=2".into())]
        );
        assert!(kv_list("novalue").is_err(), "entry without =");
    }
}
