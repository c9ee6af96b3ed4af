//! Request sniffing: the client's request body in; the facts metering needs
//! (`model`, `stream`, end user) and a body that forwards the identical bytes
//! out. Bodies over the limit, or not JSON, are forwarded unread.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use memchr::memmem;
use serde::Deserialize;

use crate::providers::scan::{Scan, Seen};
use crate::providers::{ServiceTier, deserialize_service_tier};

/// What happened to the request body on its way through the sniffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RequestBody {
    /// Read and parsed as JSON.
    #[default]
    Sniffed,
    /// No body.
    Empty,
    /// Larger than the sniff limit: forwarded unread.
    TooLarge,
    /// Not JSON: forwarded unread.
    NotJson,
    /// The client went away before its body was read.
    Unread,
}

impl RequestBody {
    /// The `tokentap.request.body` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestBody::Sniffed => "sniffed",
            RequestBody::Empty => "empty",
            RequestBody::TooLarge => "too_large",
            RequestBody::NotJson => "not_json",
            RequestBody::Unread => "unread",
        }
    }
}

/// What the request body said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sniffed {
    /// What became of the body (sniffed, empty, too large, ...).
    pub body: RequestBody,
    /// The body's `model` field, when present.
    pub model: Option<String>,
    /// The body's `stream` flag, when present.
    pub stream: Option<bool>,
    /// `stream_options.include_usage`, when given.
    pub include_usage: Option<bool>,
    /// The body has a `stream_options` member (with or without `include_usage`).
    pub has_stream_options: bool,
    /// OpenAI `user` or Anthropic `metadata.user_id`.
    pub user: Option<String>,
    /// `service_tier` (OpenAI `flex`/`priority`, Anthropic `standard_only`),
    /// when it names a tier that changes the price.
    pub service_tier: Option<ServiceTier>,
    /// OpenAI Responses `background`, when given: the response goes on
    /// (and is billed) after the client leaves.
    pub background: Option<bool>,
    /// The string at the session body field (`sessions.body_field`), when
    /// one was asked for and the body has it.
    pub session: Option<String>,
}

#[derive(Deserialize)]
struct Fields {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default, deserialize_with = "object")]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default, deserialize_with = "object")]
    metadata: Option<Metadata>,
    #[serde(default, deserialize_with = "deserialize_service_tier")]
    service_tier: Option<ServiceTier>,
    #[serde(default)]
    background: Option<bool>,
}

/// A JSON object as `T`, or `null`. Serde would also read a struct from an
/// array (`"stream_options": [true]` as `include_usage: true`); an API
/// reads such a member as no options at all, and so does this.
fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Object<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
        type Value = Option<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object or null")
        }

        fn visit_unit<E>(self) -> Result<Option<T>, E> {
            Ok(None)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Option<T>, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(Some)
        }
    }
    d.deserialize_any(Object(std::marker::PhantomData))
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

/// The searcher for `"stream_options"`, built once (`memmem::find` builds
/// one per call, which cost more than the search of a request body).
static STREAM_OPTIONS: LazyLock<memmem::Finder<'static>> =
    LazyLock::new(|| memmem::Finder::new(b"\"stream_options\""));

/// Learn what a complete JSON body says. Unknown fields are skipped, and a
/// field of an unexpected type makes the body `not_json` rather than failing.
pub fn parse(body: &[u8]) -> Sniffed {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Sniffed {
            body: RequestBody::Empty,
            ..Sniffed::default()
        };
    }
    // Serde also reads a struct from a JSON array (`["m", true]` would give
    // model `m`); every API takes an object.
    if body.trim_ascii_start().first() != Some(&b'{') {
        return Sniffed {
            body: RequestBody::NotJson,
            ..Sniffed::default()
        };
    }
    let mut sniffed = by_scan(body).unwrap_or_else(|| by_serde(body));
    if sniffed.body == RequestBody::Sniffed {
        // Also true for `null` or a mention inside a string: then nothing
        // is injected, which is the safe side.
        sniffed.has_stream_options = STREAM_OPTIONS.find(body).is_some();
    }
    sniffed
}

/// A nested object (or `null`) of which only member `name` is wanted,
/// read by `read`; the others are skipped, and a repeated `name` gives up
/// (serde rejects it).
fn only_member<'a>(
    s: &mut Scan<'a>,
    name: &str,
    mut read: impl FnMut(&mut Scan<'a>) -> Option<()>,
) -> Option<()> {
    if s.null()? {
        return Some(());
    }
    let mut seen = Seen::default();
    s.object(1, |s, key| {
        if key == name {
            seen.first(0)?;
            read(s)
        } else {
            s.skip(2)
        }
    })
}

/// The fields as serde reads them (`not_json` when it fails).
fn by_serde(body: &[u8]) -> Sniffed {
    match serde_json::from_slice::<Fields>(body) {
        Ok(f) => Sniffed {
            body: RequestBody::Sniffed,
            model: f.model,
            stream: f.stream,
            include_usage: f.stream_options.and_then(|o| o.include_usage),
            user: f.user.or(f.metadata.and_then(|m| m.user_id)),
            service_tier: f.service_tier,
            background: f.background,
            ..Sniffed::default()
        },
        Err(_) => Sniffed {
            body: RequestBody::NotJson,
            ..Sniffed::default()
        },
    }
}

/// The fields read by the validating scan (`providers/scan.rs`) in one
/// pass, as serde reads them; `None` wherever the scan is not sure serde
/// reads the body the same way, and serde then decides (errors included):
/// an escaped key or wanted string, a repeated field, a wanted field of a
/// type other than its own or `null` (a `service_tier` that is not a
/// string, `stream_options` that is not an object), anything malformed.
fn by_scan(body: &[u8]) -> Option<Sniffed> {
    let mut s = Scan::new(body)?;
    let mut out = Sniffed {
        body: RequestBody::Sniffed,
        ..Sniffed::default()
    };
    let (mut user, mut user_id) = (None, None);
    let mut seen = Seen::default();
    s.object(0, |s, key| {
        match key {
            "model" => {
                seen.first(0)?;
                out.model = s.str_or_null()?.map(str::to_owned);
            }
            "stream" => {
                seen.first(1)?;
                out.stream = s.bool_or_null()?;
            }
            "stream_options" => {
                seen.first(2)?;
                only_member(s, "include_usage", |s| {
                    out.include_usage = s.bool_or_null()?;
                    Some(())
                })?;
            }
            "user" => {
                seen.first(3)?;
                user = s.str_or_null()?;
            }
            "metadata" => {
                seen.first(4)?;
                only_member(s, "user_id", |s| {
                    user_id = s.str_or_null()?;
                    Some(())
                })?;
            }
            "service_tier" => {
                seen.first(5)?;
                out.service_tier = s.str_or_null()?.and_then(ServiceTier::parse);
            }
            "background" => {
                seen.first(6)?;
                out.background = s.bool_or_null()?;
            }
            _ => s.skip(1)?,
        }
        Some(())
    })?;
    s.end()?;
    out.user = user.or(user_id).map(str::to_owned);
    Some(out)
}

/// [`parse`], plus the string at `session_field` (object keys, outermost
/// first) when one is given.
pub fn parse_with(body: &[u8], session_field: Option<&[String]>) -> Sniffed {
    let mut sniffed = parse(body);
    if let Some(keys) = session_field
        && sniffed.body == RequestBody::Sniffed
    {
        sniffed.session = field(body, keys);
    }
    sniffed
}

/// The string at `keys` (a path of object keys) in a JSON object body;
/// `None` when the path is missing or leads to anything but a string. Read
/// by the validating scan, or by serde where the scan is not sure (an
/// escaped key or string, a repeated key: serde's last one wins).
pub fn field(body: &[u8], keys: &[String]) -> Option<String> {
    let scanned = Scan::new(body).and_then(|mut s| {
        let found = field_by_scan(&mut s, keys, 0)?;
        s.end().map(|()| found)
    });
    match scanned {
        Some(found) => found.map(str::to_owned),
        None => {
            let mut de = serde_json::Deserializer::from_slice(body);
            serde::de::DeserializeSeed::deserialize(At(keys), &mut de).ok()?
        }
    }
}

/// The scan's answer for the value at the cursor: `None` to give up,
/// `Some(None)` for no string there. One pass: members off the path are
/// skipped (and checked) where they stand.
fn field_by_scan<'a>(s: &mut Scan<'a>, keys: &[String], depth: u32) -> Option<Option<&'a str>> {
    let Some((first, rest)) = keys.split_first() else {
        return match s.raw(depth)? {
            // A string without escapes: its content; one with escapes is serde's.
            Some(r) if r.starts_with('"') => {
                let inner = &r[1..r.len() - 1];
                (!inner.contains('\\')).then_some(Some(inner))
            }
            _ => Some(None),
        };
    };
    if s.null()? {
        return Some(None);
    }
    // Anything but an object or null on the path gives up: serde says none.
    let (mut seen, mut found) = (Seen::default(), None);
    s.object(depth, |s, key| {
        if key == first {
            seen.first(0)?;
            found = field_by_scan(s, rest, depth + 1)?;
            Some(())
        } else {
            s.skip(depth + 1)
        }
    })?;
    Some(found)
}

/// Serde's walk to the wanted string: other members are skipped unread.
struct At<'k>(&'k [String]);

impl<'de> serde::de::DeserializeSeed<'de> for At<'_> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<String>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for At<'_> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<String>, E> {
        Ok(self.0.is_empty().then(|| v.to_owned()))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Option<String>, E> {
        Ok(None)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<Option<String>, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<Option<String>, A::Error> {
        let mut out = None;
        while let Some(wanted) = map.next_key_seed(KeyIs(self.0.first()))? {
            if wanted {
                out = map.next_value_seed(At(&self.0[1..]))?;
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

/// Whether a map key is the wanted one, compared without a copy.
struct KeyIs<'k>(Option<&'k String>);

impl<'de> serde::de::DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(self.0.is_some_and(|k| k == v))
    }
}

/// The body forwarded upstream: the bytes already read, then whatever the
/// client has not sent yet.
#[derive(Debug)]
pub struct Replay<B> {
    read: VecDeque<Bytes>,
    rest: Option<B>,
}

impl<B> Replay<B> {
    /// The whole body, when it was read completely.
    pub fn whole(&self) -> Option<Bytes> {
        if self.rest.is_some() {
            return None;
        }
        match self.read.len() {
            0 => Some(Bytes::new()),
            1 => self.read.front().cloned(),
            _ => Some(
                self.read
                    .iter()
                    .flat_map(|b| b.iter().copied())
                    .collect::<Vec<u8>>()
                    .into(),
            ),
        }
    }

    /// A copy that replays the same bytes, when the body was read
    /// completely (so nothing of it is still with the client). Cheap: the
    /// chunks are reference-counted.
    pub fn try_clone(&self) -> Option<Replay<B>> {
        match self.rest {
            Some(_) => None,
            None => Some(Replay {
                read: self.read.clone(),
                rest: None,
            }),
        }
    }

    /// A body of exactly `bytes`.
    pub fn full(bytes: Bytes) -> Replay<B> {
        Replay {
            read: VecDeque::from([bytes]),
            rest: None,
        }
    }
}

impl<B> Body for Replay<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        if let Some(chunk) = self.read.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self.read.iter().map(|b| b.len() as u64).sum();
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint);
        // Set the upper bound first: `set_lower` asserts lower <= upper.
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + read);
        }
        hint.set_lower(rest.lower() + read);
        hint
    }
}

/// Read `body` up to `limit` bytes. Returns what it said and a body that
/// replays the identical bytes, or the client's error when its body broke
/// off while being read (nothing is forwarded then).
pub async fn sniff<B>(
    headers: &HeaderMap,
    body: B,
    limit: usize,
) -> Result<(Sniffed, Replay<B>), B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    sniff_with(headers, body, limit, None).await
}

/// [`sniff`], also reading the string at `session_field` (object keys,
/// outermost first) when one is given.
pub async fn sniff_with<B>(
    headers: &HeaderMap,
    mut body: B,
    limit: usize,
    session_field: Option<&[String]>,
) -> Result<(Sniffed, Replay<B>), B::Error>
where
    B: Body<Data = Bytes> + Unpin,
{
    let unread = |kind, read, body| {
        let sniffed = Sniffed {
            body: kind,
            ..Sniffed::default()
        };
        Ok((
            sniffed,
            Replay {
                read,
                rest: Some(body),
            },
        ))
    };
    if !looks_like_json(headers) {
        return unread(RequestBody::NotJson, VecDeque::new(), body);
    }
    if declared_len(headers).is_some_and(|n| n > limit as u64) {
        return unread(RequestBody::TooLarge, VecDeque::new(), body);
    }
    let mut read = VecDeque::new();
    let mut total = 0usize;
    while !body.is_end_stream() {
        let Some(frame) = body.frame().await else {
            break;
        };
        // Request trailers are not forwarded; LLM APIs do not use them.
        let Ok(data) = frame?.into_data() else { break };
        total += data.len();
        read.push_back(data);
        if total > limit {
            return unread(RequestBody::TooLarge, read, body);
        }
    }
    let sniffed = match read.len() {
        0 => Sniffed {
            body: RequestBody::Empty,
            ..Sniffed::default()
        },
        1 => parse_with(&read[0], session_field),
        _ => {
            let mut whole = Vec::with_capacity(total);
            read.iter().for_each(|b| whole.extend_from_slice(b));
            parse_with(&whole, session_field)
        }
    };
    Ok((sniffed, Replay { read, rest: None }))
}

fn looks_like_json(headers: &HeaderMap) -> bool {
    match headers
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.as_bytes())
    {
        // Many clients (curl -d) send JSON as form or without a type; try anyway.
        None => true,
        // Compared without regard to case, in place (no lowercase copy).
        Some(ct) => {
            let starts = |p: &[u8]| ct.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
            ct.windows(4).any(|w| w.eq_ignore_ascii_case(b"json"))
                || starts(b"application/x-www-form-urlencoded")
                || starts(b"text/plain")
        }
    }
}

fn declared_len(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    #[test]
    fn reads_the_responses_background_flag() {
        let s = parse(br#"{"model":"o3","background":true,"stream":true,"input":"hi"}"#);
        assert_eq!((s.background, s.stream), (Some(true), Some(true)));
        assert_eq!(by_serde(br#"{"background":false}"#).background, Some(false));
        assert_eq!(parse(br#"{"model":"o3"}"#).background, None);
    }

    #[test]
    fn the_session_field_is_read_by_scan_or_serde_alike() {
        let keys = |d: &str| d.split('.').map(str::to_owned).collect::<Vec<_>>();
        let path = keys("metadata.session_id");
        for (body, want) in [
            (
                r#"{"metadata":{"user_id":"u","session_id":"s-1"},"model":"m"}"#,
                Some("s-1"),
            ),
            (
                r#"{"model":"m","messages":[{"metadata":{"session_id":"no"}}]}"#,
                None,
            ),
            (r#"{"metadata":{"session_id":5}}"#, None),
            (r#"{"metadata":null}"#, None),
            (r#"{"metadata":"s"}"#, None),
            (r#"{"metadata":{"session_id":{"x":"y"}}}"#, None),
            // Left to serde by the scan: escapes, a repeated key.
            (r#"{"metadata":{"session_id":"a\/b"}}"#, Some("a/b")),
            (r#"{"meta\u0064ata":{"session_id":"esc"}}"#, Some("esc")),
            (
                r#"{"metadata":{"session_id":"one","session_id":"two"}}"#,
                Some("two"),
            ),
            ("{\"metadata\":{\"session_id\":\"s\"}", None),
        ] {
            assert_eq!(field(body.as_bytes(), &path).as_deref(), want, "{body}");
        }
        assert_eq!(
            field(br#"{"sid":"top"}"#, &keys("sid")).as_deref(),
            Some("top")
        );
        let sniffed = parse_with(
            br#"{"model":"m","metadata":{"session_id":"s-9"}}"#,
            Some(&path),
        );
        assert_eq!(
            (sniffed.model.as_deref(), sniffed.session.as_deref()),
            (Some("m"), Some("s-9"))
        );
        assert_eq!(parse(br#"{"metadata":{"session_id":"s"}}"#).session, None);
    }

    #[test]
    fn parses_openai_and_anthropic_fields() {
        let s = parse(br#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":false},"user":"u1","messages":[{"role":"user","content":"hi"}]}"#);
        assert_eq!(s.model.as_deref(), Some("gpt-4o"));
        assert_eq!(s.stream, Some(true));
        assert_eq!(s.include_usage, Some(false));
        assert_eq!(s.user.as_deref(), Some("u1"));
        let s =
            parse(br#"{"model":"claude-sonnet-4-5","max_tokens":5,"metadata":{"user_id":"u2"}}"#);
        assert_eq!(
            (s.model.as_deref(), s.stream, s.user.as_deref()),
            (Some("claude-sonnet-4-5"), None, Some("u2"))
        );
        assert_eq!(parse(b"not json").body, RequestBody::NotJson);
        assert_eq!(parse(br#"{"model": 5}"#).body, RequestBody::NotJson);
        assert_eq!(parse(b"  ").body, RequestBody::Empty);
        let array = parse(br#" ["gpt-4o", true]"#);
        assert_eq!(
            (array.body, array.model),
            (RequestBody::NotJson, None),
            "an array is not a request object, though serde reads structs from arrays"
        );
    }

    /// Request bodies of the APIs the sniffer reads (the first ten are
    /// common shapes the scan must take, the load generator's three among
    /// them), then shapes the scan must leave to serde or read as it does.
    fn request_bodies() -> Vec<Vec<u8>> {
        let prompt = r#""messages":[{"role":"user","content":"Write a short story about a reverse proxy that counts tokens."}]"#;
        let long = "x".repeat(300);
        let out: Vec<String> = vec![
            format!(
                r#"{{"model":"gpt-4o-mini","stream":true,"stream_options":{{"include_usage":true}},"max_tokens":100,{prompt}}}"#
            ),
            format!(r#"{{"model":"gpt-4o-mini","max_tokens":100,{prompt}}}"#),
            format!(
                r#"{{"model":"claude-sonnet-4-20250514","stream":false,"max_tokens":100,{prompt}}}"#
            ),
            r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],"metadata":{"user_id":"u-7"},"service_tier":"standard_only","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"text","text":"what is this?"}]}],"tools":[{"name":"t","input_schema":{"type":"object","properties":{}}}],"thinking":{"type":"enabled","budget_tokens":2048}}"#.into(),
            r#"{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"stream":true,"service_tier":"flex","user":"alice","temperature":0.2,"top_p":1e0,"seed":-3}"#.into(),
            r#"{"model":"text-embedding-3-small","input":["a","b"],"encoding_format":"float","dimensions":256}"#.into(),
            r#"{"model":"o3","messages":[],"service_tier":"priority","stream":null,"stream_options":null,"user":null,"metadata":null}"#.into(),
            r#" { "model" : "m" , "stream" : true , "stream_options" : { } , "n" : 2 } "#.into(),
            r#"{"prompt":"once upon","model":"llama3","options":{"num_predict":5},"stream":false}"#.into(),
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":"{long}\n{long}\u00e9"}}]}}"#
            ),
            r#"{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5}}"#.into(),
            r#"{"model":"caf\u00e9"}"#.into(),
            r#"{"model":"m\"q"}"#.into(),
            r#"{"mod\u0065l":"m"}"#.into(),
            r#"{"model":"a","model":"b"}"#.into(),
            r#"{"stream":true,"stream":false}"#.into(),
            r#"{"stream_options":{"include_usage":true,"include_usage":false}}"#.into(),
            r#"{"stream_options":{"include_usage":1}}"#.into(),
            r#"{"stream_options":[true]}"#.into(),
            r#"{"stream_options":true}"#.into(),
            r#"{"metadata":{"user_id":"u","user_id":"v"}}"#.into(),
            r#"{"metadata":{"user_id":5}}"#.into(),
            r#"{"metadata":["u"]}"#.into(),
            r#"{"user":"a","metadata":{"user_id":"b"}}"#.into(),
            r#"{"metadata":{"user_id":"b","other":{"x":[1,2]}},"user":null}"#.into(),
            r#"{"service_tier":5}"#.into(),
            r#"{"service_tier":{"a":1}}"#.into(),
            r#"{"service_tier":"batch","service_tier":"flex"}"#.into(),
            r#"{"service_tier":"unknown"}"#.into(),
            r#"{"service_tier":"fl\u0065x"}"#.into(),
            r#"{"model":5}"#.into(),
            r#"{"stream":"true"}"#.into(),
            r#"{"user":["u"]}"#.into(),
            r#"{"model":"m"} {}"#.into(),
            r#"{"model":"m",}"#.into(),
            r#"{"model":"m","x":01}"#.into(),
            r#"{"model":"m","x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}"#.into(),
            r#"{"model":"m","x":"\ud83d\ude00"}"#.into(),
            "{\"model\":\"m\",\"x\":\"tab\there\"}".into(),
            "{\"model\":\"m\"}\x0c".into(),
            "{\"stream_options\": {\"include_usage\": false}, \"model\": \"gpt-4o\"}\n".into(),
            r#"{}"#.into(),
        ];
        let mut bytes: Vec<Vec<u8>> = out.into_iter().map(String::into_bytes).collect();
        bytes.push(b"{\"model\":\"\xff\"}".to_vec());
        bytes
    }

    #[test]
    fn scan_reads_request_bodies_as_serde_does() {
        for (i, body) in request_bodies().iter().enumerate() {
            let text = String::from_utf8_lossy(body);
            if i < 10 {
                assert!(by_scan(body).is_some(), "the scan takes {text}");
            }
            let mut cases = crate::providers::scan::differential::mutations(body, i as u64, 300);
            cases.push(body.clone());
            for m in cases {
                if let Some(scan) = by_scan(&m) {
                    assert_eq!(scan, by_serde(&m), "{:?}", String::from_utf8_lossy(&m));
                }
            }
        }
        // What the scan leaves to serde is read (or refused) as before.
        let s = parse(br#"{"mod\u0065l":"m","metadata":{"user_id":"caf\u00e9"}}"#);
        assert_eq!(
            (s.model.as_deref(), s.user.as_deref()),
            (Some("m"), Some("caf\u{e9}"))
        );
        assert_eq!(
            parse(br#"{"model":"a","model":"b"}"#).body,
            RequestBody::NotJson
        );
        let s = parse(br#"{"service_tier":"flex","stream_options":null}"#);
        assert_eq!(
            (s.service_tier, s.has_stream_options, s.body),
            (Some(ServiceTier::Flex), true, RequestBody::Sniffed)
        );
    }

    #[test]
    fn content_types_are_matched_without_regard_to_case() {
        let typed = |ct: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, ct.parse().expect("hv"));
            looks_like_json(&h)
        };
        for yes in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/vnd.api+Json",
            "APPLICATION/X-WWW-FORM-URLENCODED",
            "text/plain;charset=UTF-8",
            "jsoN",
        ] {
            assert!(typed(yes), "{yes}");
        }
        for no in [
            "multipart/form-data",
            "text/html",
            "jso",
            "",
            "application/x-www-form",
        ] {
            assert!(!typed(no), "{no}");
        }
        assert!(looks_like_json(&HeaderMap::new()), "no type: tried anyway");
    }

    /// A body delivered in the given pieces.
    struct Parts(VecDeque<Bytes>);

    impl Body for Parts {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn parts(p: &[&'static [u8]]) -> Parts {
        Parts(p.iter().map(|s| Bytes::from_static(s)).collect())
    }

    async fn replayed<B: Body<Data = Bytes> + Unpin>(body: Replay<B>) -> Vec<u8>
    where
        B::Error: std::fmt::Debug,
    {
        body.collect().await.expect("replay").to_bytes().to_vec()
    }

    #[tokio::test]
    async fn small_body_is_sniffed_and_replayed_identically() {
        let raw: &[u8] = br#"{"model":"m","stream":true}"#;
        let (s, body) = sniff(&HeaderMap::new(), Full::new(Bytes::from_static(raw)), 1024)
            .await
            .expect("readable");
        assert_eq!(s.model.as_deref(), Some("m"));
        assert_eq!(body.size_hint().exact(), Some(raw.len() as u64));
        assert_eq!(replayed(body).await, raw);
        let (s, body) = sniff(
            &HeaderMap::new(),
            parts(&[b"{\"model\":", b"\"m2\"}"]),
            1024,
        )
        .await
        .expect("readable");
        assert_eq!(s.model.as_deref(), Some("m2"));
        assert_eq!(replayed(body).await, b"{\"model\":\"m2\"}");
    }

    #[tokio::test]
    async fn large_body_is_forwarded_unread() {
        let (s, body) = sniff(
            &HeaderMap::new(),
            parts(&[b"{\"model\":", b"\"m\"", b", \"x\": 1}"]),
            12,
        )
        .await
        .expect("readable");
        assert_eq!(s.body, RequestBody::TooLarge);
        assert_eq!(replayed(body).await, b"{\"model\":\"m\", \"x\": 1}");
    }

    #[tokio::test]
    async fn non_json_content_type_is_not_read() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            "multipart/form-data; boundary=x".parse().expect("hv"),
        );
        let (s, body) = sniff(&h, Full::new(Bytes::from_static(b"--x")), 1024)
            .await
            .expect("readable");
        assert_eq!(s.body, RequestBody::NotJson);
        assert_eq!(replayed(body).await, b"--x");
    }
}
