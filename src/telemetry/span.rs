//! Spans: request facts and client trace headers in; the request's CLIENT
//! span (GenAI attributes, first-token event, status, end time) and the
//! upstream `traceparent` out.

use http::HeaderMap;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::SpanContext;
use opentelemetry::{Array, KeyValue, StringValue, Value};

use super::attrs::*;
use crate::meter::{Measurement, Outcome, RequestFacts, Unmetered};

/// Attributes known when the span starts (visible to samplers). The
/// provider is not among them: the response head may still name it, so it
/// is set when the span ends.
pub(super) fn span_start_attributes(facts: &RequestFacts, op: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(11);
    a.push(KeyValue::new(GEN_AI_OPERATION_NAME, op));
    if let Some(model) = &facts.request_model {
        a.push(KeyValue::new(GEN_AI_REQUEST_MODEL, model.clone()));
    }
    a.push(KeyValue::new(GEN_AI_REQUEST_STREAM, facts.stream));
    a.push(KeyValue::new(SERVER_ADDRESS, facts.server_address.clone()));
    a.push(KeyValue::new(SERVER_PORT, i64::from(facts.server_port)));
    a.push(KeyValue::new(ROUTE, facts.route.clone()));
    if let Some(tenant) = &facts.tenant {
        a.push(KeyValue::new(TENANT, tenant.clone()));
    }
    a.push(KeyValue::new(REQUEST_BODY, facts.request_body.as_str()));
    a
}

/// Read-only view of the client's headers that exposes only the W3C trace
/// context: nothing else in the request head reaches telemetry.
pub(super) struct TraceHeaders<'a>(pub &'a HeaderMap);

const TRACE_HEADERS: [&str; 2] = ["traceparent", "tracestate"];

impl Extractor for TraceHeaders<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        let key = TRACE_HEADERS
            .into_iter()
            .find(|h| h.eq_ignore_ascii_case(key))?;
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        TRACE_HEADERS
            .into_iter()
            .filter(|h| self.0.contains_key(*h))
            .collect()
    }
}

/// Writes W3C `traceparent` (and `tracestate` when there is one) for
/// `sc` into the upstream request's head, as `TraceContextPropagator`
/// would, but straight into one 55-byte header value: the propagator's
/// `format!` and injector round trip cost more than the rest of `inject`.
pub(super) fn inject_trace_context(sc: &SpanContext, headers: &mut HeaderMap) {
    if !sc.is_valid() {
        return;
    }
    let mut tp = [0u8; 55];
    tp[..3].copy_from_slice(b"00-");
    hex_into(&mut tp[3..35], &sc.trace_id().to_bytes());
    tp[35] = b'-';
    hex_into(&mut tp[36..52], &sc.span_id().to_bytes());
    tp[52] = b'-';
    hex_into(&mut tp[53..55], &[sc.trace_flags().to_u8()]);
    if let Ok(v) = http::HeaderValue::from_bytes(&tp) {
        headers.insert(http::HeaderName::from_static("traceparent"), v);
    }
    // An empty `tracestate` is the same as none; do not send the header.
    let state = sc.trace_state().header();
    if !state.is_empty()
        && let Ok(v) = http::HeaderValue::from_maybe_shared(bytes::Bytes::from(state))
    {
        headers.insert(http::HeaderName::from_static("tracestate"), v);
    }
}

/// Lower-case hex of `bytes` into `out` (twice as long).
fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = HEX[usize::from(b >> 4)];
        pair[1] = HEX[usize::from(b & 0x0f)];
    }
}

/// `error.type` when the request did not complete.
pub(super) fn error_type(m: &Measurement) -> Option<&str> {
    (m.outcome != Outcome::Complete).then(|| m.error_type.as_deref().unwrap_or(m.outcome.as_str()))
}

/// Attributes known when the request ends, in the span's order.
pub(super) fn span_finish_attributes(m: &Measurement) -> Vec<KeyValue> {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let mut a = Vec::with_capacity(24);
    a.push(KeyValue::new(
        GEN_AI_PROVIDER_NAME,
        m.request.provider.as_str(),
    ));
    let mut opt = |key: &'static str, v: Option<Value>| {
        if let Some(v) = v {
            a.push(KeyValue::new(key, v));
        }
    };
    opt(
        GEN_AI_RESPONSE_MODEL,
        m.response_model.clone().map(Value::from),
    );
    opt(GEN_AI_RESPONSE_ID, m.response_id.clone().map(Value::from));
    opt(
        GEN_AI_RESPONSE_FINISH_REASONS,
        (!m.finish_reasons.is_empty()).then(|| {
            let v: Vec<StringValue> = m.finish_reasons.iter().map(|r| r.clone().into()).collect();
            Value::Array(Array::String(v))
        }),
    );
    opt(
        GEN_AI_USAGE_INPUT_TOKENS,
        m.usage.input.map(|v| int(v).into()),
    );
    opt(
        GEN_AI_USAGE_OUTPUT_TOKENS,
        m.output_tokens.or(m.usage.output).map(|v| int(v).into()),
    );
    opt(
        GEN_AI_USAGE_CACHE_READ,
        m.usage.cache_read.map(|v| int(v).into()),
    );
    opt(
        GEN_AI_USAGE_CACHE_WRITE,
        m.usage.cache_creation.map(|v| int(v).into()),
    );
    opt(
        GEN_AI_USAGE_REASONING,
        m.reasoning.tokens.map(|v| int(v).into()),
    );
    reasoning_attributes(m, &mut opt);
    let split = &m.modalities;
    for (key, v) in [
        (GEN_AI_USAGE_TEXT_INPUT, split.input_text),
        (GEN_AI_USAGE_AUDIO_INPUT, split.input_audio),
        (USAGE_CACHE_READ_TEXT, split.cached_text),
        (USAGE_CACHE_READ_AUDIO, split.cached_audio),
        (GEN_AI_USAGE_TEXT_OUTPUT, split.output_text),
        (GEN_AI_USAGE_AUDIO_OUTPUT, split.output_audio),
    ] {
        opt(key, v.map(|v| int(v).into()));
    }
    opt(
        GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
        m.time_to_first_token
            .filter(|_| m.request.stream)
            .map(|d| d.as_secs_f64().into()),
    );
    opt(HTTP_RESPONSE_STATUS_CODE, Some(i64::from(m.status).into()));
    opt(ERROR_TYPE, error_type(m).map(|e| e.to_owned().into()));
    opt(OUTCOME, Some(m.outcome.as_str().into()));
    opt(
        MALFORMED_EVENTS,
        (m.malformed_events > 0).then(|| int(m.malformed_events).into()),
    );
    opt(TOKENS_ESTIMATED, Some(m.estimated().into()));
    opt(TOKENS_SOURCE, m.token_source.map(|s| s.as_str().into()));
    opt(DECODE_TPS, m.decode_tokens_per_second().map(Value::from));
    opt(MAX_STALL, m.max_gap.map(|d| d.as_secs_f64().into()));
    opt(TTFB, m.time_to_first_byte.map(|d| d.as_secs_f64().into()));
    opt(POOL_WAIT, m.pool_wait.map(|d| d.as_secs_f64().into()));
    opt(PREFILL_TPS, m.prefill_tokens_per_second().map(Value::from));
    opt(
        OVERHEAD_REQUEST,
        m.request_overhead.map(|d| d.as_secs_f64().into()),
    );
    let (reason, detail) = match &m.unmetered {
        Some(Unmetered::UnknownFormat(d)) => (Some("unknown_format"), Some(d.clone())),
        Some(Unmetered::Encoding(d)) => (Some("encoding"), Some(d.clone())),
        None => (None, None),
    };
    opt(UNMETERED, reason.map(Value::from));
    opt(UNMETERED_DETAIL, detail.map(Value::from));
    upstream_timing_attributes(m, &mut a);
    a
}

/// Visible TTFT, time to first reasoning, thinking time, and whether the
/// reasoning count is estimated (docs/METRICS.md).
fn reasoning_attributes(m: &Measurement, opt: &mut impl FnMut(&'static str, Option<Value>)) {
    let r = &m.reasoning;
    let secs = |d: std::time::Duration| Value::from(d.as_secs_f64());
    opt(TIME_TO_FIRST_VISIBLE, r.time_to_first_visible.map(secs));
    opt(TIME_TO_FIRST_REASONING, r.time_to_first_reasoning.map(secs));
    opt(REASONING_DURATION, r.thinking_time().map(secs));
    opt(
        REASONING_ESTIMATED,
        r.tokens.map(|_| Value::from(r.estimated())),
    );
}

/// `tokentap.upstream.*`: what the server says it spent, and the part of
/// tokentap's TTFT those figures do not explain (network, proxies, queues
/// in front of the server).
fn upstream_timing_attributes(m: &Measurement, a: &mut Vec<KeyValue>) {
    let t = &m.upstream_timing;
    for (key, value) in [
        (UPSTREAM_TTFT, t.ttft),
        (UPSTREAM_DURATION, t.total),
        (UPSTREAM_PROMPT_EVAL, t.prompt_eval),
        (UPSTREAM_DECODE, t.decode),
        (UPSTREAM_QUEUE, t.queue),
        (UPSTREAM_LOAD, t.load),
    ] {
        if let Some(d) = value {
            a.push(KeyValue::new(key, d.as_secs_f64()));
        }
    }
    if let Some((gap, share)) = network_and_queue(m) {
        a.push(KeyValue::new(TTFT_NETWORK_AND_QUEUE, gap.as_secs_f64()));
        if let Some(share) = share {
            a.push(KeyValue::new(NETWORK_QUEUE_SHARE, share));
        }
    }
}

/// max(0, TTFT − the server's TTFT-equivalent), and that as a share of
/// TTFT; `None` when either side is unknown. See docs/METRICS.md.
pub(super) fn network_and_queue(m: &Measurement) -> Option<(std::time::Duration, Option<f64>)> {
    let ttft = m.time_to_first_token?;
    let server = m.upstream_timing.first_token_equivalent(m.request.stream)?;
    let gap = ttft.saturating_sub(server);
    let secs = ttft.as_secs_f64();
    Some((gap, (secs > 0.0).then(|| gap.as_secs_f64() / secs)))
}

#[cfg(test)]
mod tests {
    use opentelemetry::Context;
    use opentelemetry::propagation::{Injector, TextMapPropagator};
    use opentelemetry::trace::{SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    use super::*;

    struct Map<'a>(&'a mut HeaderMap);
    impl Injector for Map<'_> {
        fn set(&mut self, key: &str, value: String) {
            if !value.is_empty() {
                self.0.insert(
                    http::HeaderName::from_bytes(key.as_bytes()).expect("W3C name"),
                    http::HeaderValue::from_str(&value).expect("W3C value"),
                );
            }
        }
    }

    /// What the SDK's W3C propagator writes for `sc`.
    fn by_propagator(sc: &SpanContext) -> HeaderMap {
        let mut h = HeaderMap::new();
        let cx = Context::new().with_remote_span_context(sc.clone());
        TraceContextPropagator::new().inject_context(&cx, &mut Map(&mut h));
        h
    }

    #[test]
    fn direct_trace_context_matches_the_propagator() {
        let state = TraceState::from_key_value([("vendor", "a1"), ("other", "b2")])
            .expect("a valid tracestate");
        for (flags, state) in [
            (TraceFlags::SAMPLED, TraceState::default()),
            (TraceFlags::default(), state.clone()),
            (TraceFlags::SAMPLED, state),
        ] {
            let sc = SpanContext::new(
                TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("hex"),
                SpanId::from_hex("b7ad6b7169203331").expect("hex"),
                flags,
                true,
                state,
            );
            let mut direct = HeaderMap::new();
            inject_trace_context(&sc, &mut direct);
            assert_eq!(direct, by_propagator(&sc), "{sc:?}");
            assert_eq!(direct["traceparent"].len(), 55);
        }
        let mut none = HeaderMap::new();
        inject_trace_context(&SpanContext::empty_context(), &mut none);
        assert!(none.is_empty(), "an invalid context writes nothing");
    }
}
