//! The soak's measurement count: OTLP/HTTP trace exports in (protobuf,
//! walked field by field: the bench has no generated OTLP types), per
//! request number the spans tokentap exported for it (outcome, `error.type`)
//! out. A span maps back to its request through the trace id the client
//! sent in `traceparent`: (run nonce, request number).

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// One exported span's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Measured {
    pub outcome: String,
    pub error_type: Option<String>,
}

/// Everything the receiver got.
#[derive(Debug, Default)]
pub(super) struct Spans {
    nonce: u64,
    pub by_seq: Mutex<HashMap<u64, Vec<Measured>>>,
    pub total: AtomicU64,
    /// Spans whose trace id is not one of this run's requests.
    pub foreign: AtomicU64,
    pub trace_exports: AtomicU64,
    pub metric_exports: AtomicU64,
    pub decode_errors: AtomicU64,
}

impl Spans {
    pub(super) fn new(nonce: u64) -> Spans {
        Spans {
            nonce,
            ..Spans::default()
        }
    }

    /// Take one export request (`path` is the HTTP path).
    pub(super) fn on_export(&self, path: &str, body: &[u8]) {
        if path.ends_with("/v1/metrics") {
            self.metric_exports.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if !path.ends_with("/v1/traces") {
            return;
        }
        self.trace_exports.fetch_add(1, Ordering::Relaxed);
        let mut found = Vec::new();
        if decode_traces(body, &mut found).is_none() {
            self.decode_errors.fetch_add(1, Ordering::Relaxed);
        }
        let Ok(mut map) = self.by_seq.lock() else {
            return;
        };
        for (trace, m) in found {
            self.total.fetch_add(1, Ordering::Relaxed);
            let hi = u64::from_be_bytes(trace[..8].try_into().unwrap_or_default());
            let seq = u64::from_be_bytes(trace[8..].try_into().unwrap_or_default());
            if hi == self.nonce {
                map.entry(seq).or_default().push(m);
            } else {
                self.foreign.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// `ExportTraceServiceRequest` → resource_spans (1) → scope_spans (2) →
/// spans (2) → trace_id (1), attributes (9). `None` when malformed.
fn decode_traces(buf: &[u8], out: &mut Vec<([u8; 16], Measured)>) -> Option<()> {
    for (f, v) in Fields(buf) {
        let (1, Value::Bytes(resource_spans)) = (f, v?) else {
            continue;
        };
        for (f, v) in Fields(resource_spans) {
            let (2, Value::Bytes(scope_spans)) = (f, v?) else {
                continue;
            };
            for (f, v) in Fields(scope_spans) {
                let (2, Value::Bytes(span)) = (f, v?) else {
                    continue;
                };
                out.push(decode_span(span)?);
            }
        }
    }
    Some(())
}

fn decode_span(buf: &[u8]) -> Option<([u8; 16], Measured)> {
    let mut trace = [0u8; 16];
    let mut m = Measured {
        outcome: String::new(),
        error_type: None,
    };
    for (f, v) in Fields(buf) {
        match (f, v?) {
            (1, Value::Bytes(id)) => trace = id.try_into().ok()?,
            (9, Value::Bytes(kv)) => {
                let (key, value) = key_value(kv)?;
                match key {
                    "tokentap.outcome" => m.outcome = value.unwrap_or_default(),
                    "error.type" => m.error_type = value,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Some((trace, m))
}

/// `KeyValue { key = 1; AnyValue value = 2 }`, the value when it is a string.
fn key_value(buf: &[u8]) -> Option<(&str, Option<String>)> {
    let (mut key, mut value) = ("", None);
    for (f, v) in Fields(buf) {
        match (f, v?) {
            (1, Value::Bytes(k)) => key = std::str::from_utf8(k).ok()?,
            (2, Value::Bytes(any)) => {
                for (f, v) in Fields(any) {
                    if let (1, Value::Bytes(s)) = (f, v?) {
                        value = Some(String::from_utf8_lossy(s).into_owned());
                    }
                }
            }
            _ => {}
        }
    }
    Some((key, value))
}

/// A protobuf field's value.
enum Value<'a> {
    Varint,
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a protobuf message, in order; a malformed field ends the
/// walk with `(0, None)`.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u32, Option<Value<'a>>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let parsed = self.field();
        if parsed.is_none() {
            self.0 = &[];
            return Some((0, None));
        }
        parsed.map(|(f, v)| (f, Some(v)))
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Option<(u32, Value<'a>)> {
        let tag = self.varint()?;
        let field = u32::try_from(tag >> 3).ok()?;
        let value = match tag & 7 {
            0 => {
                self.varint()?;
                Value::Varint
            }
            1 => {
                self.0 = self.0.get(8..)?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(self.varint()?).ok()?;
                let (v, rest) = (self.0.get(..len)?, self.0.get(len..)?);
                self.0 = rest;
                Value::Bytes(v)
            }
            5 => {
                self.0 = self.0.get(4..)?;
                Value::Fixed
            }
            _ => return None,
        };
        Some((field, value))
    }

    fn varint(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Some(v);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len_field(field: u32, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![u8::try_from(field << 3 | 2).unwrap_or(0)];
        let mut n = bytes.len();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out.extend_from_slice(bytes);
        out
    }

    fn attr(key: &str, value: &str) -> Vec<u8> {
        let mut kv = len_field(1, key.as_bytes());
        kv.extend(len_field(2, &len_field(1, value.as_bytes())));
        len_field(9, &kv)
    }

    #[test]
    fn spans_map_back_to_their_requests() {
        let mut trace = 5u64.to_be_bytes().to_vec();
        trace.extend(42u64.to_be_bytes());
        let mut span = len_field(1, &trace);
        span.extend([0x30, 0x03]); // kind = 3 (a varint field to skip)
        span.extend(attr("tokentap.outcome", "upstream_error"));
        span.extend(attr("error.type", "upstream_aborted"));
        span.extend(attr("gen_ai.request.model", "gpt-4o-mini"));
        let req = len_field(1, &len_field(2, &len_field(2, &span)));
        let spans = Spans::new(5);
        spans.on_export("/v1/traces", &req);
        let map = spans.by_seq.lock().expect("lock");
        assert_eq!(
            map.get(&42).map(Vec::as_slice),
            Some(
                &[Measured {
                    outcome: "upstream_error".into(),
                    error_type: Some("upstream_aborted".into())
                }][..]
            ),
            "span for request 42: {map:?}"
        );
        assert_eq!(spans.decode_errors.load(Ordering::Relaxed), 0);
        drop(map);
        spans.on_export("/v1/traces", &[0x0a, 0x05, 0x01]);
        assert_eq!(
            spans.decode_errors.load(Ordering::Relaxed),
            1,
            "a cut message is an error"
        );
    }
}
