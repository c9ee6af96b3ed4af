//! OTLP trace wire format: finished span records in; the protobuf bytes
//! of one `ExportTraceServiceRequest` out, written straight into a buffer.
//!
//! The stock path turns every span into an SDK `SpanData` (attribute list,
//! name, events), then into `opentelemetry-proto` structs (copying each
//! attribute key and string value), then measures and encodes those with
//! prost, measuring nested messages again at every level, then frees it
//! all. Here each record is written once: its attributes go from the
//! measurement straight to the wire through the same `AttributeSink`
//! functions that build the SDK form, into the request's buffer in place
//! (its length is filled in after it); the resource and the scope are
//! encoded once and kept. The bytes are what prost writes for the stock
//! conversion of the same span (fields in number order, proto3 defaults
//! left out), which the tests check byte for byte.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry::trace::SpanId;
use opentelemetry::{Array, InstrumentationScope, KeyValue, Value};
use opentelemetry_sdk::Resource;
use prost::encoding::{encoded_len_varint, key_len};

use super::attrs::EVENT_FIRST_TOKEN;
use super::span::AttributeSink;
use super::span_record::{SpanHead, SpanRecord};

/// `Span.flags`: the context says whether its parent is remote (bit 8), and
/// whether it is (bit 9); the low byte is the W3C trace flags.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// `Span.SpanKind.SPAN_KIND_CLIENT`: every tokentap span.
const KIND_CLIENT: u64 = 3;

/// `Status.StatusCode.STATUS_CODE_ERROR`.
const STATUS_ERROR: u64 = 2;

/// Reusable encoder for OTLP trace export requests. One per exporter.
#[derive(Debug)]
pub(super) struct TraceEncoder {
    /// `Resource` message body.
    resource: Vec<u8>,
    /// `ResourceSpans.schema_url`.
    resource_schema: String,
    /// `InstrumentationScope` message body.
    scope: Vec<u8>,
    /// `ScopeSpans.schema_url`.
    scope_schema: String,
    /// Attributes kept per span (`OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`); the
    /// rest are counted as dropped.
    max_attributes: usize,
    /// The request's head (the messages around the spans) while it is
    /// written.
    head: Vec<u8>,
    /// The last request's size: the next one's first capacity.
    last_len: usize,
}

impl TraceEncoder {
    /// An encoder for spans of `scope`, keeping at most `max_attributes`
    /// attributes per span.
    pub(super) fn new(scope: &InstrumentationScope, max_attributes: usize) -> TraceEncoder {
        let mut body = Vec::new();
        string_field(1, scope.name(), &mut body);
        string_field(2, scope.version().unwrap_or_default(), &mut body);
        for kv in scope.attributes() {
            key_value_field(3, kv.key.as_str(), &kv.value, &mut body);
        }
        TraceEncoder {
            resource: Vec::new(),
            resource_schema: String::new(),
            scope: body,
            scope_schema: scope.schema_url().unwrap_or_default().to_owned(),
            max_attributes,
            head: Vec::new(),
            last_len: 0,
        }
    }

    /// Spans from now on belong to `resource`.
    pub(super) fn set_resource(&mut self, resource: &Resource) {
        self.resource.clear();
        for (k, v) in resource.iter() {
            key_value_field(1, k.as_str(), v, &mut self.resource);
        }
        self.resource_schema = resource.schema_url().unwrap_or_default().to_owned();
    }

    /// The `ExportTraceServiceRequest` bytes for `records`.
    ///
    /// Written in one buffer, each byte once: room for the head is left
    /// first (its lengths depend on the spans), each span's body goes
    /// after its tag and a two-byte length that is filled in afterwards,
    /// then the head is written into the end of its room and the bytes
    /// start there.
    pub(super) fn encode(&mut self, records: &[SpanRecord]) -> Bytes {
        // Four one-byte keys (fields 1 and 2) and four lengths.
        let room = 4 * (1 + MAX_VARINT) + self.resource.len() + self.scope.len();
        let mut out = Vec::with_capacity(self.last_len.max(room));
        out.resize(room, 0);
        for r in records {
            key(2, LEN, &mut out);
            let at = out.len();
            out.extend_from_slice(&[0, 0]);
            span_body(r, self.max_attributes, &mut out);
            put_len(&mut out, at);
        }
        let spans = out.len() - room;
        let any = !records.is_empty();
        if any {
            string_field(3, &self.scope_schema, &mut out);
        }
        string_field(3, &self.resource_schema, &mut out);
        self.write_head(spans, any);
        let from = room - self.head.len();
        out[from..room].copy_from_slice(&self.head);
        self.last_len = out.len();
        Bytes::from(out).slice(from..)
    }

    /// The messages around `spans` bytes of spans, up to the first span:
    /// `ResourceSpans` with its `Resource`, and (no `ScopeSpans` in an
    /// empty batch, as the stock grouping has it) `ScopeSpans` with its
    /// scope.
    fn write_head(&mut self, spans: usize, any: bool) {
        let scope_spans_len =
            nested_len(1, self.scope.len()) + spans + string_field_len(3, &self.scope_schema);
        let resource_spans_len = nested_len(1, self.resource.len())
            + if any {
                nested_len(2, scope_spans_len)
            } else {
                0
            }
            + string_field_len(3, &self.resource_schema);
        let head = &mut self.head;
        head.clear();
        len_field(1, resource_spans_len, head);
        len_field(1, self.resource.len(), head);
        head.extend_from_slice(&self.resource);
        if any {
            len_field(2, scope_spans_len, head);
            len_field(1, self.scope.len(), head);
            head.extend_from_slice(&self.scope);
        }
    }
}

/// The longest varint (a `u64`).
const MAX_VARINT: usize = 10;

/// Write the length of the body after `out[at..at + 2]` into those two
/// bytes; a length that takes one byte or more than two moves the body
/// (short spans without attributes, or very long ones: rare).
fn put_len(out: &mut Vec<u8>, at: usize) {
    let len = out.len() - at - 2;
    if (0x80..0x4000).contains(&len) {
        out[at] = (len as u8) | 0x80;
        out[at + 1] = (len >> 7) as u8;
    } else {
        let mut v = Vec::with_capacity(MAX_VARINT);
        varint(len as u64, &mut v);
        out.splice(at..at + 2, v);
    }
}

/// One `Span` message body, fields in number order.
fn span_body(r: &SpanRecord, max_attributes: usize, out: &mut Vec<u8>) {
    let head = r.head();
    let state = head.trace_state();
    let SpanHead {
        start,
        name,
        start_time,
        end_time,
        first_token,
        error,
        ..
    } = head;
    // The exported context is the request's, sampled (`exported_context`).
    let cx = &start.context;
    bytes_field(1, &cx.trace_id().to_bytes(), out);
    bytes_field(2, &cx.span_id().to_bytes(), out);
    string_field(3, &state, out);
    if start.parent != SpanId::INVALID {
        bytes_field(4, &start.parent.to_bytes(), out);
    }
    let (word, model) = name;
    let name_len = word.len() + model.map_or(0, |m| 1 + m.len());
    if name_len > 0 {
        len_field(5, name_len, out);
        out.extend_from_slice(word.as_bytes());
        if let Some(m) = model {
            out.push(b' ');
            out.extend_from_slice(m.as_bytes());
        }
    }
    varint_field(6, KIND_CLIENT, out);
    fixed64_field(7, nanos(start_time), out);
    fixed64_field(8, nanos(end_time), out);
    let mut attributes = WireAttributes {
        out,
        room: max_attributes,
        dropped: 0,
    };
    r.attributes(&mut attributes);
    let dropped = attributes.dropped;
    varint_field(10, u64::from(dropped), out);
    if let Some(at) = first_token {
        let at = nanos(at);
        let len = fixed64_field_len(1, at) + string_field_len(2, EVENT_FIRST_TOKEN);
        len_field(11, len, out);
        fixed64_field(1, at, out);
        string_field(2, EVENT_FIRST_TOKEN, out);
    }
    // The stock conversion always sets a status, so it is always written.
    let (code, message) = error.map_or((0, ""), |e| (STATUS_ERROR, e));
    len_field(
        15,
        string_field_len(2, message) + varint_field_len(3, code),
        out,
    );
    string_field(2, message, out);
    varint_field(3, code, out);
    let sampled = match cx.is_valid() {
        true => cx.trace_flags().with_sampled(true),
        false => cx.trace_flags(),
    };
    let flags = u32::from(sampled.to_u8()) | HAS_IS_REMOTE;
    let flags = if start.parent_remote {
        flags | IS_REMOTE
    } else {
        flags
    };
    fixed32_field(16, flags, out);
}

/// Nanoseconds since the epoch; times before it are 0, as the stock
/// conversion has them.
fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A span's `attributes` (field 9) written as they come, the first
/// `room` kept and the rest counted, as the SDK's attribute limit does.
struct WireAttributes<'a> {
    out: &'a mut Vec<u8>,
    room: usize,
    dropped: u32,
}

impl WireAttributes<'_> {
    /// Whether one more attribute fits; counts it as dropped if not.
    fn admit(&mut self) -> bool {
        if self.room == 0 {
            self.dropped = self.dropped.saturating_add(1);
            return false;
        }
        self.room -= 1;
        true
    }
}

impl AttributeSink for WireAttributes<'_> {
    fn str(&mut self, name: &'static str, v: &str) {
        self.keyed_str(name, v);
    }
    fn int(&mut self, name: &'static str, v: i64) {
        if self.admit() {
            attribute(
                9,
                name,
                key_len(3) + encoded_len_varint(v as u64),
                self.out,
                |out| {
                    key(3, VARINT, out);
                    varint(v as u64, out);
                },
            );
        }
    }
    fn float(&mut self, name: &'static str, v: f64) {
        if self.admit() {
            attribute(9, name, key_len(4) + 8, self.out, |out| {
                key(4, FIXED64, out);
                out.extend_from_slice(&v.to_le_bytes());
            });
        }
    }
    fn bool(&mut self, name: &'static str, v: bool) {
        if self.admit() {
            attribute(9, name, key_len(2) + 1, self.out, |out| {
                key(2, VARINT, out);
                out.push(u8::from(v));
            });
        }
    }
    fn strs(&mut self, name: &'static str, v: &[String]) {
        if self.admit() {
            let body: usize = v.iter().map(|s| string_element_len(s)).sum();
            attribute(9, name, nested_len(5, body), self.out, |out| {
                len_field(5, body, out);
                v.iter().for_each(|s| string_element(s, out));
            });
        }
    }
    fn key_value(&mut self, kv: &KeyValue) {
        if self.admit() {
            key_value_field(9, kv.key.as_str(), &kv.value, self.out);
        }
    }
    fn keyed_str(&mut self, name: &str, v: &str) {
        if self.admit() {
            attribute(9, name, nested_len(1, v.len()), self.out, |out| {
                bytes_any(1, v.as_bytes(), out)
            });
        }
    }
}

/// A `KeyValue` message as field `tag`: the key, then an `AnyValue` of
/// `value_len` bytes that `value` writes.
#[inline]
fn attribute(
    tag: u32,
    key: &str,
    value_len: usize,
    out: &mut Vec<u8>,
    value: impl FnOnce(&mut Vec<u8>),
) {
    let len = string_field_len(1, key) + nested_len(2, value_len);
    out.reserve(nested_len(tag, len));
    len_field(tag, len, out);
    string_field(1, key, out);
    len_field(2, value_len, out);
    value(out);
}

/// A `KeyValue` message as field `tag`, from an SDK value.
fn key_value_field(tag: u32, key: &str, value: &Value, out: &mut Vec<u8>) {
    attribute(tag, key, any_value_len(value), out, |out| {
        any_value(value, out)
    });
}

/// A length-delimited `oneof` member: written even when empty, as prost
/// does for a set oneof.
fn bytes_any(tag: u32, b: &[u8], out: &mut Vec<u8>) {
    len_field(tag, b.len(), out);
    out.extend_from_slice(b);
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
        Value::String(s) => bytes_any(1, s.as_str().as_bytes(), out),
        Value::Array(a) => {
            len_field(5, array_len(a), out);
            array(a, out);
        }
        // A value kind newer than this encoder: its text form, rather
        // than losing the attribute.
        other => bytes_any(1, other.as_str().as_bytes(), out),
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
        Array::String(v) => v.iter().for_each(|s| string_element(s.as_str(), out)),
        // An array kind newer than this encoder: empty rather than wrong.
        _ => {}
    }
}

fn array_len(a: &Array) -> usize {
    match a {
        Array::Bool(v) => v.iter().map(|b| element_len(&Value::Bool(*b))).sum(),
        Array::I64(v) => v.iter().map(|i| element_len(&Value::I64(*i))).sum(),
        Array::F64(v) => v.iter().map(|f| element_len(&Value::F64(*f))).sum(),
        Array::String(v) => v.iter().map(|s| string_element_len(s.as_str())).sum(),
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

/// A string `AnyValue` as an array element.
fn string_element(s: &str, out: &mut Vec<u8>) {
    len_field(1, nested_len(1, s.len()), out);
    bytes_any(1, s.as_bytes(), out);
}

fn string_element_len(s: &str) -> usize {
    nested_len(1, nested_len(1, s.len()))
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

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceState;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use prost::Message;

    use super::super::span_record::tests::records;
    use super::*;

    fn scope() -> InstrumentationScope {
        InstrumentationScope::builder("tokentap")
            .with_version("0.1.0")
            .build()
    }

    fn resource() -> Resource {
        Resource::builder_empty()
            .with_attributes([
                KeyValue::new("service.name", "tokentap"),
                KeyValue::new("service.version", "0.1.0"),
            ])
            .build()
    }

    /// What the SDK form of `records` and the stock conversion and prost
    /// make of them.
    fn stock(
        records: &[SpanRecord],
        scope: &InstrumentationScope,
        max_attributes: usize,
        resource: &Resource,
    ) -> ExportTraceServiceRequest {
        let spans = records
            .iter()
            .map(|r| r.span_data(scope, max_attributes))
            .collect();
        let r = ResourceAttributesWithSchema::from(resource);
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(spans, &r),
        }
    }

    fn encoder(scope: &InstrumentationScope, max: usize, resource: &Resource) -> TraceEncoder {
        let mut enc = TraceEncoder::new(scope, max);
        enc.set_resource(resource);
        enc
    }

    #[test]
    fn every_record_shape_encodes_as_the_stock_conversion_of_its_sdk_span() {
        let records = records();
        assert!(records.len() > 16, "{} records", records.len());
        let (scope, r) = (scope(), resource());
        let mut enc = encoder(&scope, 128, &r);
        // One at a time first: a mismatch names the record.
        for (i, one) in records.iter().enumerate() {
            let one = std::slice::from_ref(one);
            let want = stock(one, &scope, 128, &r);
            let ours = enc.encode(one);
            let decoded = ExportTraceServiceRequest::decode(ours.clone())
                .unwrap_or_else(|e| panic!("record {i} does not decode: {e}"));
            assert_eq!(decoded, want, "record {i} decodes to another span");
            assert_eq!(ours, want.encode_to_vec(), "record {i}: bytes differ");
        }
        let ours = enc.encode(&records);
        assert_eq!(ours, stock(&records, &scope, 128, &r).encode_to_vec());
    }

    #[test]
    fn the_attribute_limit_keeps_the_first_and_counts_the_rest() {
        let records = records();
        let (scope, r) = (scope(), resource());
        for max in [0, 1, 5, 12] {
            let mut enc = encoder(&scope, max, &r);
            let want = stock(&records, &scope, max, &r);
            assert_eq!(enc.encode(&records), want.encode_to_vec(), "limit {max}");
            let spans = &want.resource_spans[0].scope_spans[0].spans;
            assert!(spans.iter().all(|s| s.attributes.len() <= max));
            assert!(spans.iter().any(|s| s.dropped_attributes_count > 0));
        }
    }

    #[test]
    fn decoded_fields_are_the_records_fields() {
        let records = records();
        let mut enc = encoder(&scope(), 128, &resource());
        let bytes = enc.encode(&records);
        let req = ExportTraceServiceRequest::decode(bytes.clone()).expect("decodes");
        let rs = &req.resource_spans[0];
        assert_eq!(rs.scope_spans.len(), 1, "one scope for every span");
        let got = &rs.scope_spans[0];
        let s = got.scope.as_ref().expect("scope");
        assert_eq!((s.name.as_str(), s.version.as_str()), ("tokentap", "0.1.0"));
        assert_eq!(got.spans.len(), records.len());
        for (span, record) in got.spans.iter().zip(&records) {
            let head = record.head();
            let cx = &head.start.context;
            assert_eq!(span.trace_id, cx.trace_id().to_bytes());
            assert_eq!(span.span_id, cx.span_id().to_bytes());
            assert_eq!(span.kind, 3, "client");
            let remote = if head.start.parent_remote { 0x200 } else { 0 };
            assert_eq!(span.flags, 0x101 | remote, "sampled, has-is-remote");
            match head.name.1 {
                Some(model) => assert_eq!(span.name, format!("{} {model}", head.name.0)),
                None => assert_eq!(span.name, head.name.0),
            }
            let status = span.status.as_ref().expect("status");
            assert_eq!(status.code, if head.error.is_some() { 2 } else { 0 });
            assert_eq!(status.message, head.error.unwrap_or_default());
            assert_eq!(span.events.len(), usize::from(head.first_token.is_some()));
        }
        let tenants: Vec<_> = got
            .spans
            .iter()
            .flat_map(|s| &s.attributes)
            .filter(|kv| kv.key == "tokentap.tenant")
            .filter_map(|kv| kv.value.clone()?.value)
            .collect();
        assert!(
            tenants.contains(&any_value::Value::StringValue("team-a".into())),
            "{tenants:?}"
        );
    }

    #[test]
    fn buffers_are_reused_and_an_empty_batch_is_the_resource_alone() {
        let records = records();
        let scope = InstrumentationScope::builder("tokentap")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("k", 1_i64)])
            .build();
        let r = Resource::builder_empty()
            .with_schema_url([KeyValue::new("service.name", "t")], "https://x/schema")
            .build();
        let mut enc = encoder(&scope, 128, &r);
        for n in [records.len(), 3, 1, 0, 2] {
            let batch = &records[..n];
            assert_eq!(
                enc.encode(batch),
                stock(batch, &scope, 128, &r).encode_to_vec(),
                "{n} records after a larger batch carry nothing over"
            );
        }
        // The trace state travels; the fixture has one.
        assert!(
            records
                .iter()
                .any(|r| r.head().start.context.trace_state() != &TraceState::default())
        );
    }

    #[test]
    fn a_span_length_of_any_size_is_the_shortest_varint_before_its_body() {
        for len in [0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 70_000] {
            let body: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = vec![0xaa, 0, 0];
            out.extend_from_slice(&body);
            put_len(&mut out, 1);
            let mut want = vec![0xaa];
            prost::encoding::encode_varint(len as u64, &mut want);
            want.extend_from_slice(&body);
            assert_eq!(out, want, "length {len}");
        }
    }
}
