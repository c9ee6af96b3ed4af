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

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&parse::fmt_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        parse::duration(&text(d)?).map_err(de::Error::custom)
    }
}

/// A duration longer than zero.
pub(super) mod positive {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        duration::serialize(d, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
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

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => duration::serialize(d, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        positive::deserialize(d).map(Some)
    }
}

/// A byte count larger than zero (`"8MiB"`, `"64KiB"`, `1000`).
pub(super) mod size {
    use super::*;

    pub fn serialize<S: Serializer>(n: &usize, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&parse::fmt_size(*n))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
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
