//! Wire helpers shared by several adapters: borrowed JSON strings, "is
//! this value empty" checks and arrays folded into "any content"; JSON in,
//! small facts out, no provider knowledge.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{ReportedCost, ServiceTier};

/// A JSON value that is present and not `""`, `[]` or `{}` (`null` never
/// reaches here: `Option` turns it into `None`).
pub(crate) fn non_empty(raw: Option<&RawValue>) -> bool {
    raw.is_some_and(|r| non_empty_raw(r.get()))
}

/// `non_empty` on a raw value's text.
pub(crate) fn non_empty_raw(raw: &str) -> bool {
    !matches!(raw, "\"\"" | "[]" | "{}" | "null")
}

/// An element type that may or may not carry output content.
pub(crate) trait HasContent {
    fn has_content(&self) -> bool;
}

/// An array folded while parsing, element by element, into one value:
/// nothing is kept per element unless `add` keeps it.
pub(crate) trait Fold<'de>: Default {
    /// What each element is read as.
    type Item: Deserialize<'de>;
    /// What a type error says was expected.
    const EXPECTING: &'static str;
    fn add(&mut self, item: Self::Item);
}

/// `Deserialize` for `Fold` types, through `fold`: `Name<'a>` for one that
/// borrows from the payload, `Name` for one that does not.
macro_rules! deserialize_by_fold {
    ($t:ident<$a:lifetime>) => {
        impl<'de: $a, $a> serde::Deserialize<'de> for $t<$a> {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::providers::wire::fold(d)
            }
        }
    };
    ($t:ident) => {
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::providers::wire::fold(d)
            }
        }
    };
}
pub(crate) use deserialize_by_fold;

/// `Deserialize::deserialize` of a `Fold` type (`deserialize_by_fold!`).
pub(crate) fn fold<'de, F: Fold<'de>, D: Deserializer<'de>>(d: D) -> Result<F, D::Error> {
    struct V<F>(PhantomData<F>);
    impl<'de, F: Fold<'de>> Visitor<'de> for V<F> {
        type Value = F;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(F::EXPECTING)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<F, A::Error> {
            let mut all = F::default();
            while let Some(item) = seq.next_element::<F::Item>()? {
                all.add(item);
            }
            Ok(all)
        }
    }
    d.deserialize_seq(V(PhantomData))
}

/// An array folded while parsing into "does any element carry content".
pub(crate) struct AnyContent<T>(pub bool, PhantomData<T>);

impl<T> Default for AnyContent<T> {
    fn default() -> Self {
        AnyContent(false, PhantomData)
    }
}

impl<'de, T: Deserialize<'de> + HasContent> Fold<'de> for AnyContent<T> {
    type Item = T;
    const EXPECTING: &'static str = "an array";
    fn add(&mut self, item: T) {
        self.0 |= item.has_content();
    }
}

impl<'de, T: Deserialize<'de> + HasContent> Deserialize<'de> for AnyContent<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fold(d)
    }
}

/// An element type whose output content is visible, reasoning, or none.
pub(crate) trait HasKind {
    /// `(visible, reasoning)`: what output this element carries.
    fn kinds(&self) -> (bool, bool);
}

/// A JSON string borrowed from the payload when it has no escapes
/// (`Option<Cow<str>>` with `#[serde(borrow)]` would always copy).
pub(crate) struct Str<'a>(pub Cow<'a, str>);

impl Str<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Str<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Str<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Str<'a>, E> {
                Ok(Str(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V(PhantomData))
    }
}

/// An object as far as its `name`: a Bedrock `toolUse`, a Gemini
/// `functionCall`, the `function` of an Ollama tool call.
#[derive(Deserialize)]
pub(crate) struct Named<'a> {
    #[serde(borrow)]
    pub(crate) name: Option<Str<'a>>,
}

impl<'a> Named<'a> {
    /// The `name` of the JSON object `raw`; `None` when it has none or is
    /// not such an object.
    pub(crate) fn of(raw: &'a RawValue) -> Option<Str<'a>> {
        serde_json::from_str::<Named<'a>>(raw.get()).ok()?.name
    }
}

/// The `function` of an OpenAI-style tool call (OpenAI's chat and
/// Cohere v2's): its name and arguments, raw.
#[derive(Deserialize)]
pub(crate) struct ToolFunction<'a> {
    #[serde(borrow)]
    pub(crate) name: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(crate) arguments: Option<&'a RawValue>,
}

impl HasContent for ToolFunction<'_> {
    fn has_content(&self) -> bool {
        non_empty(self.name) || non_empty(self.arguments)
    }
}

impl<'a> ToolFunction<'a> {
    /// The function's name, when it is a non-empty string.
    pub(crate) fn name_str(&self) -> Option<Str<'a>> {
        let raw = self.name.filter(|n| non_empty(Some(n)))?;
        serde_json::from_str::<Str<'a>>(raw.get()).ok()
    }
}

/// A `service_tier` string as the tier it names (`None` for `null`, for
/// values that do not change the price, and for anything not a string:
/// never an error, so a request body or payload stays readable).
pub(crate) fn service_tier<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<ServiceTier>, D::Error> {
    d.deserialize_any(Lenient {
        expecting: "a service tier string",
        text: ServiceTier::parse,
        number: |_| None,
    })
}

/// A provider-reported cost: a number in USD, else nothing (an object or
/// string some router puts there is skipped, never a malformed payload).
pub(crate) fn reported_cost<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<ReportedCost>, D::Error> {
    d.deserialize_any(Lenient {
        expecting: "a cost",
        text: |_| None,
        number: ReportedCost::new,
    })
}

/// Reads one JSON value of any shape into `Option<T>`: a string through
/// `text`, a number through `number`, and anything else (null, a bool, an
/// object, an array, skipped whole) as `None`, never an error.
struct Lenient<T> {
    expecting: &'static str,
    text: fn(&str) -> Option<T>,
    number: fn(f64) -> Option<T>,
}

impl<'de, T> Visitor<'de> for Lenient<T> {
    type Value = Option<T>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok((self.text)(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok((self.number)(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok((self.number)(v as f64))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok((self.number)(v as f64))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Self::Value, A::Error> {
        while m
            .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
            .is_some()
        {}
        Ok(None)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut s: A) -> Result<Self::Value, A::Error> {
        while s.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}
