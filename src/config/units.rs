//! Serde helpers for typed config fields: durations (`"5s"`), sizes
//! (`"8MiB"`) and bounded counts in, checked values out, with the same
//! wording as `parse`; out again in the form `parse` reads back. Use them
//! with `#[serde(with = "units::…")]` on a config field.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serializer};

use super::parse;

/// A duration or size as written: a string with a unit or a bare number
/// (kept as text so the parser can say *why* `5` is not a duration).
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string with a unit, like \"5s\" or \"8MiB\"")
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<String, E> {
            Ok(n.to_string())
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<String, E> {
            i64::try_from(n)
                .map(|n| n.to_string())
                .map_err(|_| E::custom(format!("{n} is too large")))
        }
        fn visit_f64<E: de::Error>(self, n: f64) -> Result<String, E> {
            Ok(n.to_string())
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<String, E> {
            Ok(s.to_owned())
        }
    }
    d.deserialize_any(V)
}

/// Any duration, zero included (`"0s"`, `"250ms"`, `"1h30m"`).
pub(super) mod duration {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&parse::fmt_duration(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parse::duration(&text(d)?).map_err(de::Error::custom)
    }
}

/// A duration longer than zero.
pub(super) mod positive {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        duration::serialize(d, s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let d = duration::deserialize(d)?;
        if d.is_zero() {
            return Err(de::Error::custom("must be longer than zero"));
        }
        Ok(d)
    }
}

/// An optional duration longer than zero; unset = none.
pub(super) mod opt_positive {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        positive::deserialize(d).map(Some)
    }
}

/// A byte count larger than zero (`"8MiB"`, `"64KiB"`, `1000`).
pub(super) mod size {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&parse::fmt_size(*n))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
        let n = parse::size(&text(d)?).map_err(de::Error::custom)?;
        if n == 0 {
            return Err(de::Error::custom("must be larger than zero"));
        }
        Ok(n)
    }
}

/// A count of at least 1.
pub(super) fn at_least_one<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if n == 0 {
        return Err(de::Error::custom("must be at least 1"));
    }
    Ok(n)
}

/// A share from 0 to 1 inclusive (`0.01`, `1`).
pub(super) fn ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let v = decimal(d)?;
    if !(0.0..=1.0).contains(&v) {
        return Err(de::Error::custom(format!(
            "{v} is not a share: use a number from 0 to 1 (0.01 = one request in a hundred)"
        )));
    }
    Ok(v)
}

/// A number as written: figment reads a short decimal from the environment
/// or a flag (`"0.01"`) as an `f32`, whose widening would show as
/// `0.009999999776482582`; it is taken by its decimal digits instead.
pub(super) fn decimal<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct V;
    impl Visitor<'_> for V {
        type Value = f64;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a number")
        }
        fn visit_f32<E: de::Error>(self, n: f32) -> Result<f64, E> {
            Ok(n.to_string().parse().unwrap_or(f64::from(n)))
        }
        fn visit_f64<E: de::Error>(self, n: f64) -> Result<f64, E> {
            Ok(n)
        }
        fn visit_i64<E: de::Error>(self, n: i64) -> Result<f64, E> {
            Ok(n as f64)
        }
        fn visit_u64<E: de::Error>(self, n: u64) -> Result<f64, E> {
            Ok(n as f64)
        }
    }
    d.deserialize_f64(V)
}

/// [`decimal`] for an optional number.
pub(super) fn opt_decimal<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    decimal(d).map(Some)
}

/// `routes[].prefix`: must start with `/`; trailing slashes dropped.
pub(super) fn prefix<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    parse::prefix(&String::deserialize(d)?).map_err(de::Error::custom)
}

/// `routes[].host`: a host name or IP without port, lowercased.
pub(super) fn host<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    parse::host(&String::deserialize(d)?)
        .map(Some)
        .map_err(de::Error::custom)
}

/// `routes[].upstream`: an http(s) base URL; shown without the trailing
/// `/` of an empty path.
pub(super) mod upstream {
    use super::*;

    /// The upstream as the docs write it.
    pub(crate) fn shown(uri: &http::Uri) -> String {
        let url = uri.to_string();
        match url.strip_suffix('/') {
            Some(bare) if uri.path() == "/" => bare.to_owned(),
            _ => url,
        }
    }

    pub(crate) fn serialize<S: Serializer>(uri: &http::Uri, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&shown(uri))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<http::Uri, D::Error> {
        parse::upstream_url(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// `[routes.sigv4]`: the settings in, credentials resolved from the `AWS_*`
/// environment where unset; shown as region, service and key id only.
pub(super) mod sigv4 {
    use std::sync::Arc;

    use super::super::sigv4::{SigV4Config, SigV4Settings};
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        c: &Option<Arc<SigV4Config>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        use serde::Serialize;
        // Secrets never leave.
        c.as_ref()
            .map(|c| SigV4Settings {
                region: Some(c.region.clone()),
                service: Some(c.service.clone()),
                access_key_id: Some(c.access_key_id.clone()),
                secret_access_key: None,
                session_token: None,
            })
            .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Arc<SigV4Config>>, D::Error> {
        SigV4Settings::deserialize(d)?
            .resolve(|k| std::env::var(k).ok())
            .map(|c| Some(Arc::new(c)))
            .map_err(de::Error::custom)
    }
}

/// `routes[].proxy`: `"none"` or a proxy URL; shown with the password
/// redacted.
pub(super) mod route_proxy {
    use super::super::proxy::RouteProxy;
    use super::*;

    pub(crate) fn serialize<S: Serializer>(p: &RouteProxy, s: S) -> Result<S::Ok, S::Error> {
        match p.shown() {
            Some(text) => s.serialize_str(&text),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RouteProxy, D::Error> {
        RouteProxy::parse(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// Written in place of secrets when the effective config is shown.
pub(super) const REDACTED: &str = "<redacted>";

/// A secret: read as is, always written as [`REDACTED`]. Mark a field with
/// `#[serde(serialize_with = "units::secret")]`.
pub(super) fn secret<T, S: Serializer>(_: &T, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(REDACTED)
}

/// `name = "value"` pairs: a TOML table in, sorted pairs out (and back).
pub(super) mod pairs {
    use std::collections::BTreeMap;

    use super::*;
    use serde::Serialize;

    pub(crate) fn serialize<S: Serializer>(
        p: &[(String, String)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        p.iter().cloned().collect::<BTreeMap<_, _>>().serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        Ok(BTreeMap::<String, String>::deserialize(d)?
            .into_iter()
            .collect())
    }
}

/// Header pairs whose names must be valid header names and whose values
/// are secrets (written as [`REDACTED`]).
pub(super) mod secret_headers {
    use std::collections::BTreeMap;

    use super::*;
    use serde::Serialize;

    pub(crate) fn serialize<S: Serializer>(
        p: &[(String, String)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        p.iter()
            .map(|(k, _)| (k.as_str(), REDACTED))
            .collect::<BTreeMap<_, _>>()
            .serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, String)>, D::Error> {
        let pairs = pairs::deserialize(d)?;
        for (k, _) in &pairs {
            parse::header_name(k).map_err(de::Error::custom)?;
        }
        Ok(pairs)
    }
}

/// A list of names: a TOML array, or a comma-separated string (handy in env vars).
pub(super) fn names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a list of strings or a comma-separated string")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Vec<String>, E> {
            let items = s.split(',').map(str::trim).filter(|i| !i.is_empty());
            Ok(items.map(String::from).collect())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(V)
}

/// One HTTP header name (stored lowercase).
pub(super) mod header {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(h: &http::HeaderName, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(h.as_str())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<http::HeaderName, D::Error> {
        parse::header_name(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// A list of HTTP header names ([`names`] syntax).
pub(super) mod headers {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(
        h: &[http::HeaderName],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(h.iter().map(http::HeaderName::as_str))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<http::HeaderName>, D::Error> {
        names(d)?
            .iter()
            .map(|h| parse::header_name(h).map_err(de::Error::custom))
            .collect()
    }
}

/// A value named in a config list of sources (`[tenant] sources`,
/// `[sessions] sources`).
pub(super) trait Source: Copy + PartialEq + 'static {
    /// What the list holds, for errors (`tenant source`).
    const WHAT: &'static str;
    /// Every value, in the order an error lists their names.
    const ALL: &'static [Self];
    /// The name used in config.
    fn name(self) -> &'static str;
}

impl Source for crate::config::TenantSource {
    const WHAT: &'static str = "tenant source";
    const ALL: &'static [Self] = &[Self::Header, Self::Body, Self::ApiKey, Self::ClientCert];
    fn name(self) -> &'static str {
        self.as_str()
    }
}

impl Source for crate::config::SessionSource {
    const WHAT: &'static str = "session source";
    const ALL: &'static [Self] = &[Self::Header, Self::Body, Self::Agents];
    fn name(self) -> &'static str {
        self.as_str()
    }
}

/// Sources in order, each once (tenant: `header`, `body`, `api_key`,
/// `client_cert`; session: `header`, `body`, `agents`).
pub(super) mod sources {
    use super::*;

    pub(crate) fn serialize<T: Source, S: Serializer>(v: &[T], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|t| t.name()))
    }

    pub(crate) fn deserialize<'de, T: Source, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<T>, D::Error> {
        let mut sources = Vec::new();
        for name in names(d)? {
            let Some(s) = T::ALL.iter().copied().find(|s| s.name() == name.trim()) else {
                return Err(de::Error::custom(format!(
                    "unknown {} `{}`; expected {}",
                    T::WHAT,
                    name.trim(),
                    expected::<T>()
                )));
            };
            if sources.contains(&s) {
                return Err(de::Error::custom(format!("`{name}` is listed twice")));
            }
            sources.push(s);
        }
        Ok(sources)
    }

    /// The names as a sentence: `` `a`, `b` or `c` ``.
    fn expected<T: Source>() -> String {
        let names: Vec<String> = T::ALL.iter().map(|s| format!("`{}`", s.name())).collect();
        match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// A JSON body field as a dotted path (`metadata.session_id`).
pub(super) mod body_field {
    use super::*;
    use crate::config::BodyField;

    pub(crate) fn serialize<S: Serializer>(f: &BodyField, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&f.to_string())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BodyField, D::Error> {
        BodyField::parse(&String::deserialize(d)?).map_err(de::Error::custom)
    }
}

/// The longest session id kept whole: 16 to 1024 bytes (shorter leaves no
/// room for the hash a longer id is shortened to).
pub(super) fn session_id_length<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    usize_within(d, 16, 1024, " (bytes)")
}

/// Sessions kept: 1 to 10,000,000 (about 4 GB of rollups at the top).
pub(super) fn session_count<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    usize_within(d, 1, 10_000_000, "")
}

/// A whole number from `lo` to `hi`; `unit` follows the bounds in the
/// error (`must be between 16 and 1024 (bytes), got 8`).
fn usize_within<'de, D: Deserializer<'de>>(
    d: D,
    lo: usize,
    hi: usize,
    unit: &str,
) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if !(lo..=hi).contains(&n) {
        return Err(de::Error::custom(format!(
            "must be between {lo} and {hi}{unit}, got {n}"
        )));
    }
    Ok(n)
}

/// An optional OTLP collector endpoint: an http(s) URL with a host.
pub(super) fn endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    parse::endpoint_url(&String::deserialize(d)?)
        .map(Some)
        .map_err(de::Error::custom)
}

/// A name that must not be blank.
pub(super) fn non_blank<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.trim().is_empty() {
        return Err(de::Error::custom("must not be empty"));
    }
    Ok(s)
}

/// The tenant salt: must not be empty.
pub(super) fn salt<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s.is_empty() {
        return Err(de::Error::custom(
            "must not be empty; set a secret shared by all replicas",
        ));
    }
    Ok(s)
}
