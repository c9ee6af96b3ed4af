//! `routes[].labels`: what the operator says about a route (hardware,
//! quantization, serving stack), carried on every request of the route
//! into its span as `tokentap.route.label.<key>`. Never a metric label.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most labels one route may carry.
pub const MAX_LABELS: usize = 16;
/// Longest label key, in bytes.
pub const MAX_KEY_LEN: usize = 64;
/// Longest label value, in bytes.
pub const MAX_VALUE_LEN: usize = 256;
/// What a label's span attribute key starts with (`attrs::ROUTE_LABEL`).
pub const ATTRIBUTE_PREFIX: &str = crate::attrs::ROUTE_LABEL;

/// A route's labels, sorted by key. Cloned into every request's facts, so
/// it is shared: no labels is `None` (no reference count to touch), some
/// are one `Arc`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RouteLabels(Option<Arc<[Label]>>);

/// One label: its span attribute key (`tokentap.route.label.<key>`) and value.
#[derive(Debug, PartialEq, Eq)]
struct Label {
    attribute: Box<str>,
    value: Box<str>,
}

impl Label {
    fn key(&self) -> &str {
        &self.attribute[ATTRIBUTE_PREFIX.len()..]
    }
}

impl RouteLabels {
    /// Checks the bounds (count, key characters and lengths) and builds
    /// the labels; the error names the offending key.
    pub fn new(map: BTreeMap<String, String>) -> Result<RouteLabels, String> {
        if map.len() > MAX_LABELS {
            return Err(format!(
                "{} labels; at most {MAX_LABELS} per route",
                map.len()
            ));
        }
        let mut out = Vec::with_capacity(map.len());
        for (key, value) in map {
            check_key(&key)?;
            if value.is_empty() || value.len() > MAX_VALUE_LEN {
                return Err(format!(
                    "label `{key}`: the value must be 1 to {MAX_VALUE_LEN} bytes"
                ));
            }
            out.push(Label {
                attribute: format!("{ATTRIBUTE_PREFIX}{key}").into(),
                value: value.into(),
            });
        }
        Ok(RouteLabels((!out.is_empty()).then(|| Arc::from(out))))
    }

    /// No labels.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// The value of label `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.labels()
            .iter()
            .find(|l| l.key() == key)
            .map(|l| &*l.value)
    }

    /// `(key, value)` pairs, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels().iter().map(|l| (l.key(), &*l.value))
    }

    /// `(span attribute key, value)` pairs, sorted by key.
    pub fn attributes(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels().iter().map(|l| (&*l.attribute, &*l.value))
    }

    fn labels(&self) -> &[Label] {
        self.0.as_deref().unwrap_or_default()
    }
}

/// `[a-z0-9_.]`, 1 to `MAX_KEY_LEN` bytes, no leading, trailing or double dot.
fn check_key(key: &str) -> Result<(), String> {
    let chars_ok = key
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.".contains(&b));
    let dots_ok = !key.starts_with('.') && !key.ends_with('.') && !key.contains("..");
    if key.is_empty() || key.len() > MAX_KEY_LEN || !chars_ok || !dots_ok {
        return Err(format!(
            "label `{key}`: keys are 1 to {MAX_KEY_LEN} of `a-z`, `0-9`, `_` and `.` \
             (a `.` only between two others)"
        ));
    }
    Ok(())
}

impl fmt::Debug for RouteLabels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for RouteLabels {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for RouteLabels {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RouteLabels::new(BTreeMap::deserialize(d)?).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Result<RouteLabels, String> {
        RouteLabels::new(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn labels_keep_their_keys_sorted_with_attribute_keys() {
        let l = labels(&[("quantization", "fp8"), ("hardware", "H100")]).expect("valid");
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            [("hardware", "H100"), ("quantization", "fp8")]
        );
        assert_eq!(
            l.attributes().collect::<Vec<_>>(),
            [
                ("tokentap.route.label.hardware", "H100"),
                ("tokentap.route.label.quantization", "fp8")
            ]
        );
        assert_eq!(l.get("hardware"), Some("H100"));
        assert_eq!(l.get("gpu"), None);
        assert!(!l.is_empty());
        assert!(labels(&[]).expect("empty").is_empty());
    }

    #[test]
    fn bounds_are_errors_naming_the_key() {
        for bad in [
            "Hardware",
            "gpu-kind",
            "",
            ".a",
            "a.",
            "a..b",
            &"k".repeat(65),
        ] {
            let e = labels(&[(bad, "x")]).expect_err(bad);
            assert!(e.contains(&format!("label `{bad}`")), "{e}");
        }
        let e = labels(&[("gpu", "")]).expect_err("empty value");
        assert!(e.contains("label `gpu`") && e.contains("value"), "{e}");
        let e = labels(&[("gpu", &"v".repeat(257))]).expect_err("long value");
        assert!(e.contains("label `gpu`"), "{e}");
        assert!(labels(&[("gpu", &"v".repeat(256)), (&"k".repeat(64), "x")]).is_ok());
        let many: Vec<(String, String)> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
        let e = RouteLabels::new(many.into_iter().collect()).expect_err("17 labels");
        assert!(e.contains("at most 16"), "{e}");
        assert!(labels(&[("serving.stack_v2", "vllm 0.6")]).is_ok());
    }
}
