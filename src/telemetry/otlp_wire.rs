//! OTLP trace wire format: finished SDK spans in; the protobuf bytes of one
//! `ExportTraceServiceRequest` out, written straight into a buffer.
//!
//! The stock exporter first converts every span into `opentelemetry-proto`
//! structs (copying each attribute key and string value), then measures and
//! encodes those structs with prost, measuring nested messages again at every
//! level, then frees them: about 34 k instructions per tokentap span (see
//! docs/BENCHMARKS.md, issue 17). Here each span is written once from the
//! borrowed `SpanData`: scalar fields and attributes have closed-form
//! lengths, a span's body goes into a reused scratch buffer (its length is
//! then known) and is copied once into its scope's buffer; the resource and
//! each scope are encoded once and kept. The bytes are what prost would
//! write for the same message (fields in number order, proto3 defaults
//! left out), which the tests check byte for byte.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::{encoded_len_varint, key_len};

/// `Span.flags`: the context says whether its parent is remote (bit 8), and
/// whether it is (bit 9); the low byte is the W3C trace flags.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// Scopes whose encoding is kept between batches; tokentap has one (a
/// second would come from a library span), so this only bounds a surprise.
const MAX_SCOPES: usize = 8;

/// Reusable encoder for OTLP trace export requests. One per exporter; the
/// resource is encoded when set, each scope the first time it is seen.
#[derive(Debug, Default)]
pub(super) struct TraceEncoder {
    /// `Resource` message body.
    resource: Vec<u8>,
    /// `ResourceSpans.schema_url`.
    resource_schema: String,
    /// Known scopes and their `InstrumentationScope` message bodies.
    scopes: Vec<(InstrumentationScope, Vec<u8>)>,
    /// Per scope of the current batch: index into `scopes`, and the
    /// encoded `spans` fields (tag, length, body each).
    groups: Vec<(usize, Vec<u8>)>,
    /// One span's body while it is written.
    span: Vec<u8>,
}

impl TraceEncoder {
    /// An encoder for spans of `resource`.
    pub(super) fn new(resource: &Resource) -> TraceEncoder {
        let mut e = TraceEncoder::default();
        e.set_resource(resource);
        e
    }

    /// Spans from now on belong to `resource`.
    pub(super) fn set_resource(&mut self, resource: &Resource) {
        self.resource.clear();
        for (k, v) in resource.iter() {
            key_value_field(1, k.as_str(), v, &mut self.resource);
        }
        self.resource_schema = resource.schema_url().unwrap_or_default().to_owned();
    }

    /// The `ExportTraceServiceRequest` bytes for `spans`.
    pub(super) fn encode(&mut self, spans: &[SpanData]) -> Vec<u8> {
        for (_, g) in &mut self.groups {
            g.clear();
        }
        let mut used = 0;
        for s in spans {
            let scope = self.scope_index(&s.instrumentation_scope);
            let group = match self.groups[..used].iter().position(|(i, _)| *i == scope) {
                Some(g) => g,
                None => {
                    if used == self.groups.len() {
                        self.groups.push((scope, Vec::new()));
                    }
                    self.groups[used].0 = scope;
                    used += 1;
                    used - 1
                }
            };
            self.span.clear();
            span_body(s, &mut self.span);
            let out = &mut self.groups[group].1;
            len_field(2, self.span.len(), out);
            out.extend_from_slice(&self.span);
        }
        self.request(used)
    }

    /// The index of `scope` in `self.scopes`, encoding it if new.
    fn scope_index(&mut self, scope: &InstrumentationScope) -> usize {
        if let Some(i) = self.scopes.iter().position(|(s, _)| s == scope) {
            return i;
        }
        let mut body = Vec::new();
        string_field(1, scope.name(), &mut body);
        string_field(2, scope.version().unwrap_or_default(), &mut body);
        for kv in scope.attributes() {
            key_value_field(3, kv.key.as_str(), &kv.value, &mut body);
        }
        if self.scopes.len() == MAX_SCOPES {
            // Keep the batch's groups pointing at the right scopes: only
            // forget scopes when no group of this batch is open.
            if self.groups.iter().all(|(_, g)| g.is_empty()) {
                self.scopes.clear();
            }
        }
        self.scopes.push((scope.clone(), body));
        self.scopes.len() - 1
    }

    /// Assemble the request from the resource and the first `used` groups.
    fn request(&self, used: usize) -> Vec<u8> {
        let groups = &self.groups[..used];
        let scope_spans_len = |(scope, spans): &(usize, Vec<u8>)| {
            let (sc, body) = &self.scopes[*scope];
            nested_len(1, body.len())
                + spans.len()
                + string_field_len(3, sc.schema_url().unwrap_or_default())
        };
        let resource_spans_len = nested_len(1, self.resource.len())
            + groups
                .iter()
                .map(|g| nested_len(2, scope_spans_len(g)))
                .sum::<usize>()
            + string_field_len(3, &self.resource_schema);
        let mut out = Vec::with_capacity(nested_len(1, resource_spans_len));
        len_field(1, resource_spans_len, &mut out);
        len_field(1, self.resource.len(), &mut out);
        out.extend_from_slice(&self.resource);
        for g in groups {
            let (sc, body) = &self.scopes[g.0];
            len_field(2, scope_spans_len(g), &mut out);
            len_field(1, body.len(), &mut out);
            out.extend_from_slice(body);
            out.extend_from_slice(&g.1);
            string_field(3, sc.schema_url().unwrap_or_default(), &mut out);
        }
        string_field(3, &self.resource_schema, &mut out);
        out
    }
}

/// One `Span` message body, fields in number order.
fn span_body(s: &SpanData, out: &mut Vec<u8>) {
    ids(&s.span_context, out);
    if s.parent_span_id != SpanId::INVALID {
        bytes_field(4, &s.parent_span_id.to_bytes(), out);
    }
    string_field(5, &s.name, out);
    varint_field(6, kind(&s.span_kind), out);
    fixed64_field(7, nanos(s.start_time), out);
    fixed64_field(8, nanos(s.end_time), out);
    for kv in &s.attributes {
        key_value_field(9, kv.key.as_str(), &kv.value, out);
    }
    varint_field(10, u64::from(s.dropped_attributes_count), out);
    for e in s.events.iter() {
        let attrs = attributes_len(3, &e.attributes);
        let len = fixed64_field_len(1, nanos(e.timestamp))
            + string_field_len(2, &e.name)
            + attrs
            + varint_field_len(4, u64::from(e.dropped_attributes_count));
        len_field(11, len, out);
        fixed64_field(1, nanos(e.timestamp), out);
        string_field(2, &e.name, out);
        attributes(3, &e.attributes, out);
        varint_field(4, u64::from(e.dropped_attributes_count), out);
    }
    varint_field(12, u64::from(s.events.dropped_count), out);
    for l in s.links.iter() {
        let state = l.span_context.trace_state().header();
        let flags = span_flags(l.span_context.is_remote(), &l.span_context);
        let len = ids_len(&l.span_context)
            + string_field_len(3, &state)
            + attributes_len(4, &l.attributes)
            + varint_field_len(5, u64::from(l.dropped_attributes_count))
            + fixed32_field_len(6, flags);
        len_field(13, len, out);
        bytes_field(1, &l.span_context.trace_id().to_bytes(), out);
        bytes_field(2, &l.span_context.span_id().to_bytes(), out);
        string_field(3, &state, out);
        attributes(4, &l.attributes, out);
        varint_field(5, u64::from(l.dropped_attributes_count), out);
        fixed32_field(6, flags, out);
    }
    varint_field(14, u64::from(s.links.dropped_count), out);
    let (code, message) = match &s.status {
        Status::Unset => (0, ""),
        Status::Ok => (1, ""),
        Status::Error { description } => (2, description.as_ref()),
    };
    len_field(
        15,
        string_field_len(2, message) + varint_field_len(3, code),
        out,
    );
    string_field(2, message, out);
    varint_field(3, code, out);
    fixed32_field(
        16,
        span_flags(s.parent_span_is_remote, &s.span_context),
        out,
    );
}

/// Trace id (1), span id (2) and trace state (3) of a span.
fn ids(cx: &SpanContext, out: &mut Vec<u8>) {
    bytes_field(1, &cx.trace_id().to_bytes(), out);
    bytes_field(2, &cx.span_id().to_bytes(), out);
    let state = cx.trace_state().header();
    string_field(3, &state, out);
}

/// Length of a link's trace id and span id fields.
fn ids_len(cx: &SpanContext) -> usize {
    nested_len(1, cx.trace_id().to_bytes().len()) + nested_len(2, cx.span_id().to_bytes().len())
}

fn span_flags(remote: bool, cx: &SpanContext) -> u32 {
    let base = u32::from(cx.trace_flags().to_u8()) | HAS_IS_REMOTE;
    if remote { base | IS_REMOTE } else { base }
}

/// `Span.SpanKind` numbers.
fn kind(k: &SpanKind) -> u64 {
    match k {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

/// Nanoseconds since the epoch; times before it are 0, as the stock
/// conversion has them.
fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn attributes(tag: u32, kvs: &[KeyValue], out: &mut Vec<u8>) {
    for kv in kvs {
        key_value_field(tag, kv.key.as_str(), &kv.value, out);
    }
}

fn attributes_len(tag: u32, kvs: &[KeyValue]) -> usize {
    kvs.iter()
        .map(|kv| nested_len(tag, key_value_len(kv.key.as_str(), &kv.value)))
        .sum()
}

/// A `KeyValue` message as field `tag`.
fn key_value_field(tag: u32, key: &str, value: &Value, out: &mut Vec<u8>) {
    let value_len = any_value_len(value);
    let len = string_field_len(1, key) + nested_len(2, value_len);
    out.reserve(nested_len(tag, len));
    len_field(tag, len, out);
    string_field(1, key, out);
    len_field(2, value_len, out);
    any_value(value, out);
}

fn key_value_len(key: &str, value: &Value) -> usize {
    string_field_len(1, key) + nested_len(2, any_value_len(value))
}

/// An `AnyValue` body: the one field of its `oneof`, written even when it
/// holds a default (empty string, false, 0), as prost does for a set oneof.
fn any_value(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Bool(b) => {
            key(2, VARINT, out);
            varint(u64::from(*b), out);
        }
        Value::I64(i) => {
            key(3, VARINT, out);
            varint(*i as u64, out);
        }
        Value::F64(f) => {
            key(4, FIXED64, out);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Value::String(s) => {
            len_field(1, s.as_str().len(), out);
            out.extend_from_slice(s.as_str().as_bytes());
        }
        Value::Array(a) => {
            len_field(5, array_len(a), out);
            array(a, out);
        }
        // A value kind newer than this encoder: its text form, rather
        // than losing the attribute.
        other => {
            let s = other.as_str();
            len_field(1, s.len(), out);
            out.extend_from_slice(s.as_bytes());
        }
    }
}

fn any_value_len(v: &Value) -> usize {
    match v {
        Value::Bool(b) => key_len(2) + encoded_len_varint(u64::from(*b)),
        Value::I64(i) => key_len(3) + encoded_len_varint(*i as u64),
        Value::F64(_) => key_len(4) + 8,
        Value::String(s) => nested_len(1, s.as_str().len()),
        Value::Array(a) => nested_len(5, array_len(a)),
        other => nested_len(1, other.as_str().len()),
    }
}

/// An `ArrayValue` body: each element an `AnyValue` in field 1.
fn array(a: &Array, out: &mut Vec<u8>) {
    match a {
        Array::Bool(v) => v.iter().for_each(|b| element(&Value::Bool(*b), out)),
        Array::I64(v) => v.iter().for_each(|i| element(&Value::I64(*i), out)),
        Array::F64(v) => v.iter().for_each(|f| element(&Value::F64(*f), out)),
        Array::String(v) => v.iter().for_each(|s| string_element(s, out)),
        // An array kind newer than this encoder: empty rather than wrong.
        _ => {}
    }
}

fn array_len(a: &Array) -> usize {
    match a {
        Array::Bool(v) => v.iter().map(|b| element_len(&Value::Bool(*b))).sum(),
        Array::I64(v) => v.iter().map(|i| element_len(&Value::I64(*i))).sum(),
        Array::F64(v) => v.iter().map(|f| element_len(&Value::F64(*f))).sum(),
        Array::String(v) => v
            .iter()
            .map(|s| nested_len(1, nested_len(1, s.as_str().len())))
            .sum(),
        _ => 0,
    }
}

fn element(v: &Value, out: &mut Vec<u8>) {
    len_field(1, any_value_len(v), out);
    any_value(v, out);
}

fn element_len(v: &Value) -> usize {
    nested_len(1, any_value_len(v))
}

fn string_element(s: &StringValue, out: &mut Vec<u8>) {
    let s = s.as_str();
    len_field(1, nested_len(1, s.len()), out);
    len_field(1, s.len(), out);
    out.extend_from_slice(s.as_bytes());
}

/// Protobuf wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;
const FIXED32: u32 = 5;

/// A field key (number and wire type); OTLP's field numbers are small, so
/// it is one byte but for `Span.flags` (16).
#[inline]
fn key(tag: u32, wire_type: u32, out: &mut Vec<u8>) {
    varint(u64::from(tag << 3 | wire_type), out);
}

/// A base-128 varint; lengths, tags and counts mostly take one byte, so
/// that case is inlined and the loop is not.
#[inline]
fn varint(v: u64, out: &mut Vec<u8>) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        long_varint(v, out);
    }
}

#[inline(never)]
fn long_varint(mut v: u64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    out.extend_from_slice(&buf[..=n]);
}

/// Key and length of a length-delimited field whose body follows.
#[inline]
fn len_field(tag: u32, len: usize, out: &mut Vec<u8>) {
    key(tag, LEN, out);
    varint(len as u64, out);
}

/// Size of a length-delimited field with a `len`-byte body.
fn nested_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// A proto3 string field: left out when empty.
fn string_field(tag: u32, s: &str, out: &mut Vec<u8>) {
    bytes_field(tag, s.as_bytes(), out);
}

fn string_field_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        nested_len(tag, s.len())
    }
}

/// A proto3 bytes field: left out when empty.
fn bytes_field(tag: u32, b: &[u8], out: &mut Vec<u8>) {
    if !b.is_empty() {
        len_field(tag, b.len(), out);
        out.extend_from_slice(b);
    }
}

/// A proto3 varint field (uint32, uint64, enum): left out when 0.
fn varint_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        key(tag, VARINT, out);
        varint(v, out);
    }
}

fn varint_field_len(tag: u32, v: u64) -> usize {
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

/// A proto3 fixed64 field: left out when 0.
fn fixed64_field(tag: u32, v: u64, out: &mut Vec<u8>) {
    if v != 0 {
        key(tag, FIXED64, out);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed64_field_len(tag: u32, v: u64) -> usize {
    if v == 0 { 0 } else { key_len(tag) + 8 }
}

/// A proto3 fixed32 field: left out when 0.
fn fixed32_field(tag: u32, v: u32, out: &mut Vec<u8>) {
    if v != 0 {
        key(tag, FIXED32, out);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn fixed32_field_len(tag: u32, v: u32) -> usize {
    if v == 0 { 0 } else { key_len(tag) + 4 }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{Event, Link, SpanContext, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanEvents, SpanLinks};
    use prost::Message;

    use super::*;

    fn context(trace: u128, span: u64, remote: bool) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::SAMPLED,
            remote,
            TraceState::default(),
        )
    }

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_764_000_000_000 + ms)
    }

    fn scope() -> InstrumentationScope {
        InstrumentationScope::builder("tokentap")
            .with_version("0.1.0")
            .build()
    }

    /// A request span as tokentap makes them: client kind, remote parent,
    /// every attribute type, the first-token event.
    fn request_span() -> SpanData {
        let mut events = SpanEvents::default();
        events.events.push(Event::new(
            "gen_ai.first_token",
            at(120),
            vec![KeyValue::new("gen_ai.output.tokens", 1_i64)],
            0,
        ));
        SpanData {
            span_context: context(
                0x0af7651916cd43dd8448eb211c80319c,
                0xb7ad6b7169203331,
                false,
            ),
            parent_span_id: SpanId::from(0x00f067aa0ba902b7),
            parent_span_is_remote: true,
            span_kind: SpanKind::Client,
            name: Cow::Borrowed("chat gpt-4o-mini"),
            start_time: at(0),
            end_time: at(950),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", "gpt-4o-mini"),
                KeyValue::new("tokentap.tenant", "équipe-東京-🚀"),
                KeyValue::new("tokentap.route", ""),
                KeyValue::new("gen_ai.usage.output_tokens", 512_i64),
                KeyValue::new("tokentap.in_flight", -3_i64),
                KeyValue::new("gen_ai.server.time_to_first_token", 0.120_f64),
                KeyValue::new("tokentap.tokens_estimated", false),
                KeyValue::new("tokentap.complete", true),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec!["stop".into(), "".into(), "長さ".into()])),
                ),
                KeyValue::new("ints", Value::Array(Array::I64(vec![0, -1, i64::MAX]))),
                KeyValue::new("doubles", Value::Array(Array::F64(vec![0.0, -2.5]))),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("empty", Value::Array(Array::I64(vec![]))),
            ],
            dropped_attributes_count: 2,
            events,
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope(),
        }
    }

    /// A root span with an error status, a link and no events.
    fn root_span() -> SpanData {
        let mut links = SpanLinks::default();
        links.links.push(Link::new(
            context(7, 8, true),
            vec![KeyValue::new("why", "session")],
            1,
        ));
        links.dropped_count = 3;
        SpanData {
            span_context: context(1, 2, false),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Server,
            name: Cow::Owned("websocket realtime".into()),
            start_time: at(5),
            end_time: at(6),
            attributes: vec![],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links,
            status: Status::error("upstream_error: é"),
            instrumentation_scope: scope(),
        }
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "tokentap"),
                KeyValue::new("service.version", "0.1.0"),
            ])
            .build()
    }

    /// What the stock conversion and prost make of `spans`.
    fn stock(spans: Vec<SpanData>, resource: &Resource) -> ExportTraceServiceRequest {
        let r = ResourceAttributesWithSchema::from(resource);
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(spans, &r),
        }
    }

    #[test]
    fn bytes_match_the_stock_encoding_and_decode_to_the_same_request() {
        let spans = vec![request_span(), root_span(), request_span()];
        // One resource for both: its attribute order is its map's.
        let r = resource();
        let mut enc = TraceEncoder::new(&r);
        let ours = enc.encode(&spans);
        let expected = stock(spans, &r);
        let decoded =
            ExportTraceServiceRequest::decode(ours.as_slice()).expect("our bytes must decode");
        assert_eq!(
            decoded, expected,
            "decoded request differs from the stock conversion"
        );
        assert_eq!(ours, expected.encode_to_vec(), "bytes differ from prost's");
    }

    #[test]
    fn decoded_fields_are_the_span_fields() {
        let mut enc = TraceEncoder::new(&resource());
        let bytes = enc.encode(&[request_span(), root_span()]);
        let req = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let rs = &req.resource_spans[0];
        assert_eq!(rs.scope_spans.len(), 1, "one scope for both spans");
        let scope = rs.scope_spans[0].scope.as_ref().expect("scope");
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("tokentap", "0.1.0")
        );
        let [child, root] = &rs.scope_spans[0].spans[..] else {
            panic!("expected two spans, got {:?}", rs.scope_spans[0].spans);
        };
        assert_eq!(child.parent_span_id, 0x00f067aa0ba902b7_u64.to_be_bytes());
        assert_eq!(child.flags, 0x301, "sampled, has-is-remote, remote parent");
        assert_eq!(child.kind, 3, "client");
        assert_eq!(
            child.end_time_unix_nano - child.start_time_unix_nano,
            950_000_000
        );
        let tenant = child
            .attributes
            .iter()
            .find(|kv| kv.key == "tokentap.tenant");
        assert_eq!(
            tenant.and_then(|kv| kv.value.clone()).and_then(|v| v.value),
            Some(any_value::Value::StringValue("équipe-東京-🚀".into()))
        );
        let route = child
            .attributes
            .iter()
            .find(|kv| kv.key == "tokentap.route");
        assert_eq!(
            route.and_then(|kv| kv.value.clone()).and_then(|v| v.value),
            Some(any_value::Value::StringValue(String::new())),
            "an empty string value is still a string value"
        );
        assert_eq!(child.events[0].name, "gen_ai.first_token");
        assert_eq!(child.dropped_attributes_count, 2);
        assert!(
            root.parent_span_id.is_empty(),
            "a root span has no parent id"
        );
        assert_eq!(root.flags, 0x101, "sampled, has-is-remote, local");
        let status = root.status.as_ref().expect("status");
        assert_eq!(
            (status.code, status.message.as_str()),
            (2, "upstream_error: é")
        );
        assert_eq!(root.links[0].flags, 0x301);
        assert_eq!(root.dropped_links_count, 3);
    }

    #[test]
    fn a_second_scope_gets_its_own_scope_spans_and_the_buffers_are_reused() {
        let mut other = root_span();
        other.instrumentation_scope = InstrumentationScope::builder("hyper")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("k", 1_i64)])
            .build();
        let resource = Resource::builder_empty()
            .with_schema_url([KeyValue::new("service.name", "t")], "https://x/schema")
            .build();
        let mut enc = TraceEncoder::new(&resource);
        for _ in 0..3 {
            let spans = vec![request_span(), other.clone(), request_span()];
            let ours = enc.encode(&spans);
            assert_eq!(ours, stock(spans, &resource).encode_to_vec());
        }
        let one = vec![root_span()];
        assert_eq!(
            enc.encode(&one),
            stock(one, &resource).encode_to_vec(),
            "a smaller batch after a larger one carries nothing over"
        );
    }

    #[test]
    fn an_empty_batch_is_the_resource_alone() {
        let r = resource();
        let mut enc = TraceEncoder::new(&r);
        assert_eq!(enc.encode(&[]), stock(vec![], &r).encode_to_vec());
    }
}
