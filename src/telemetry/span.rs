//! Spans: request facts and client trace headers in; the request's CLIENT
//! span (GenAI attributes, first-token event, status, end time) and the
//! upstream `traceparent` out.

use http::HeaderMap;
use opentelemetry::propagation::Extractor;
use opentelemetry::trace::SpanContext;
use opentelemetry::{Array, KeyValue, StringValue, Value};

use super::attrs::*;
use crate::meter::{Measurement, Outcome, RequestFacts, Unmetered};
use crate::providers::{Operation, ServerTool};

/// Where a span's attributes go: a `KeyValue` list for the SDK's span
/// form, or straight into the OTLP protobuf (`otlp_wire`). One function per
/// attribute group writes to either, so the two forms cannot drift apart.
pub(super) trait AttributeSink {
    fn str(&mut self, key: &'static str, v: &str);
    fn int(&mut self, key: &'static str, v: i64);
    fn float(&mut self, key: &'static str, v: f64);
    fn bool(&mut self, key: &'static str, v: bool);
    /// A string array.
    fn strs(&mut self, key: &'static str, v: &[String]);
    /// An attribute someone else built (a sampler's, the SLO mark).
    fn key_value(&mut self, kv: &KeyValue);
    /// A string under a key made at configuration time (a route label's).
    fn keyed_str(&mut self, key: &str, v: &str);

    /// A count, saturating at `i64::MAX`.
    fn count(&mut self, key: &'static str, v: u64) {
        self.int(key, i64::try_from(v).unwrap_or(i64::MAX));
    }
    fn count_opt(&mut self, key: &'static str, v: Option<u64>) {
        if let Some(v) = v {
            self.count(key, v);
        }
    }
    /// A duration in seconds.
    fn secs_opt(&mut self, key: &'static str, v: Option<std::time::Duration>) {
        if let Some(d) = v {
            self.float(key, d.as_secs_f64());
        }
    }
    fn float_opt(&mut self, key: &'static str, v: Option<f64>) {
        if let Some(v) = v {
            self.float(key, v);
        }
    }
    fn str_opt(&mut self, key: &'static str, v: Option<&str>) {
        if let Some(v) = v {
            self.str(key, v);
        }
    }
}

impl AttributeSink for Vec<KeyValue> {
    fn str(&mut self, key: &'static str, v: &str) {
        self.push(KeyValue::new(key, v.to_owned()));
    }
    fn int(&mut self, key: &'static str, v: i64) {
        self.push(KeyValue::new(key, v));
    }
    fn float(&mut self, key: &'static str, v: f64) {
        self.push(KeyValue::new(key, v));
    }
    fn bool(&mut self, key: &'static str, v: bool) {
        self.push(KeyValue::new(key, v));
    }
    fn strs(&mut self, key: &'static str, v: &[String]) {
        let v: Vec<StringValue> = v.iter().map(|s| s.clone().into()).collect();
        self.push(KeyValue::new(key, Value::Array(Array::String(v))));
    }
    fn key_value(&mut self, kv: &KeyValue) {
        self.push(kv.clone());
    }
    fn keyed_str(&mut self, key: &str, v: &str) {
        self.push(KeyValue::new(key.to_owned(), v.to_owned()));
    }
}

/// `gen_ai.operation.name` of a request (`unknown` when its path named no
/// operation); it also starts the span's name.
pub(super) fn operation_name(facts: &RequestFacts) -> &'static str {
    facts.operation.map_or(OPERATION_UNKNOWN, Operation::name)
}

/// Attributes known when the span starts (visible to samplers). The
/// provider is not among them: the response head may still name it, so it
/// is set when the span ends.
pub(super) fn start_attributes(facts: &RequestFacts, a: &mut impl AttributeSink) {
    a.str(GEN_AI_OPERATION_NAME, operation_name(facts));
    a.str_opt(GEN_AI_REQUEST_MODEL, facts.request_model.as_deref());
    a.bool(GEN_AI_REQUEST_STREAM, facts.stream);
    a.str(SERVER_ADDRESS, &facts.server_address);
    a.int(SERVER_PORT, i64::from(facts.server_port));
    a.str(ROUTE, &facts.route);
    a.str_opt(TENANT, facts.tenant.as_deref());
    a.str(REQUEST_BODY, facts.request_body.as_str());
    a.str_opt(GEN_AI_CONVERSATION_ID, facts.session.as_deref());
    // `ROUTE_LABEL` + key: the keys are the operator's, made once per config.
    for (key, v) in facts.route_labels.attributes() {
        a.keyed_str(key, v);
    }
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

/// A batch result file's models and line counts.
fn batch_attributes(b: &crate::providers::batch::BatchTally, a: &mut impl AttributeSink) {
    let models: Vec<String> = b.models.iter().map(|(m, _)| m.clone()).collect();
    if !models.is_empty() {
        a.strs(BATCH_MODELS, &models);
    }
    a.count(BATCH_LINES, b.lines);
    a.count(BATCH_SUCCEEDED, b.succeeded);
    a.count(BATCH_ERRORED, b.errored);
    a.count(BATCH_CANCELED, b.canceled);
    a.count(BATCH_EXPIRED, b.expired);
    a.count(BATCH_UNREADABLE, b.unreadable);
    a.count(BATCH_OVERSIZE, b.oversize);
}

/// Attributes known when the request ends, in the span's order.
pub(super) fn finish_attributes(m: &Measurement, a: &mut impl AttributeSink) {
    a.str(GEN_AI_PROVIDER_NAME, m.request.provider.as_str());
    a.str_opt(GEN_AI_RESPONSE_MODEL, m.response_model.as_deref());
    a.str_opt(GEN_AI_RESPONSE_ID, m.response_id.as_deref());
    if !m.finish_reasons.is_empty() {
        a.strs(GEN_AI_RESPONSE_FINISH_REASONS, &m.finish_reasons);
    }
    let batch_total = m.batch.as_ref().map(|b| b.total());
    let batch_total = batch_total.as_ref();
    a.count_opt(
        GEN_AI_USAGE_INPUT_TOKENS,
        m.usage.input.or(batch_total.and_then(|t| t.input)),
    );
    a.count_opt(
        GEN_AI_USAGE_OUTPUT_TOKENS,
        m.output_tokens
            .or(m.usage.output)
            .or(batch_total.and_then(|t| t.output)),
    );
    if let Some(b) = &m.batch {
        batch_attributes(b, a);
    }
    a.count_opt(GEN_AI_USAGE_CACHE_READ, m.usage.cache_read);
    a.count_opt(GEN_AI_USAGE_CACHE_WRITE, m.usage.cache_creation);
    a.count_opt(GEN_AI_USAGE_REASONING, m.reasoning.tokens);
    reasoning_attributes(m, a);
    let split = &m.modalities;
    a.count_opt(GEN_AI_USAGE_TEXT_INPUT, split.input_text);
    a.count_opt(GEN_AI_USAGE_AUDIO_INPUT, split.input_audio);
    a.count_opt(USAGE_CACHE_READ_TEXT, split.cached_text);
    a.count_opt(USAGE_CACHE_READ_AUDIO, split.cached_audio);
    a.count_opt(GEN_AI_USAGE_TEXT_OUTPUT, split.output_text);
    a.count_opt(GEN_AI_USAGE_AUDIO_OUTPUT, split.output_audio);
    a.secs_opt(
        GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK,
        m.time_to_first_token.filter(|_| m.request.stream),
    );
    a.int(HTTP_RESPONSE_STATUS_CODE, i64::from(m.status));
    a.str_opt(ERROR_TYPE, error_type(m));
    a.str(OUTCOME, m.outcome.as_str());
    if m.malformed_events > 0 {
        a.count(MALFORMED_EVENTS, m.malformed_events);
    }
    a.bool(TOKENS_ESTIMATED, m.estimated());
    a.str_opt(TOKENS_SOURCE, m.token_source.map(|s| s.as_str()));
    a.str_opt(USAGE_COUNTED, m.counted.map(|c| c.as_str()));
    a.str_opt(STATE, m.shared_state.map(|s| s.as_str()));
    a.float_opt(DECODE_TPS, m.decode_tokens_per_second());
    a.secs_opt(MAX_STALL, m.max_gap);
    a.secs_opt(TTFB, m.time_to_first_byte);
    a.secs_opt(POOL_WAIT, m.pool_wait);
    a.float_opt(PREFILL_TPS, m.prefill_tokens_per_second());
    a.secs_opt(OVERHEAD_REQUEST, m.request_overhead);
    let unmetered = match &m.unmetered {
        Some(Unmetered::UnknownFormat(d)) => Some(("unknown_format", d)),
        Some(Unmetered::Encoding(d)) => Some(("encoding", d)),
        None => None,
    };
    if let Some((reason, detail)) = unmetered {
        a.str(UNMETERED, reason);
        a.str(UNMETERED_DETAIL, detail);
    }
    upstream_timing_attributes(m, a);
    tool_attributes(m, a);
}

/// `tokentap.tool.*`: client tool calls and their names, and each
/// provider-run tool's calls; nothing when no tool was used.
fn tool_attributes(m: &Measurement, a: &mut impl AttributeSink) {
    let t = &m.tools;
    if t.client_calls > 0 {
        a.count(TOOL_CALLS, u64::from(t.client_calls));
    }
    if !t.names.is_empty() {
        let names: Vec<String> = t.names.iter().map(|n| n.to_string()).collect();
        a.strs(TOOL_NAMES, &names);
    }
    for tool in ServerTool::ALL {
        let calls = t.server.get(tool);
        if calls > 0 {
            a.count(server_tool_attribute(tool), u64::from(calls));
        }
    }
}

/// The span attribute counting one provider-run tool.
pub(super) fn server_tool_attribute(tool: ServerTool) -> &'static str {
    match tool {
        ServerTool::WebSearch => SERVER_TOOL_WEB_SEARCH,
        ServerTool::WebFetch => SERVER_TOOL_WEB_FETCH,
        ServerTool::FileSearch => SERVER_TOOL_FILE_SEARCH,
        ServerTool::CodeInterpreter => SERVER_TOOL_CODE_INTERPRETER,
        ServerTool::Grounding => SERVER_TOOL_GROUNDING,
    }
}

/// Visible TTFT, time to first reasoning, thinking time, and whether the
/// reasoning count is estimated (docs/METRICS.md).
fn reasoning_attributes(m: &Measurement, a: &mut impl AttributeSink) {
    let r = &m.reasoning;
    a.secs_opt(TIME_TO_FIRST_VISIBLE, r.time_to_first_visible);
    a.secs_opt(TIME_TO_FIRST_REASONING, r.time_to_first_reasoning);
    a.secs_opt(REASONING_DURATION, r.thinking_time());
    if r.tokens.is_some() {
        a.bool(REASONING_ESTIMATED, r.estimated());
    }
}

/// `tokentap.upstream.*`: what the server says it spent, and the part of
/// tokentap's TTFT those figures do not explain (network, proxies, queues
/// in front of the server).
fn upstream_timing_attributes(m: &Measurement, a: &mut impl AttributeSink) {
    let t = &m.upstream_timing;
    a.secs_opt(UPSTREAM_TTFT, t.ttft);
    a.secs_opt(UPSTREAM_DURATION, t.total);
    a.secs_opt(UPSTREAM_PROMPT_EVAL, t.prompt_eval);
    a.secs_opt(UPSTREAM_DECODE, t.decode);
    a.secs_opt(UPSTREAM_QUEUE, t.queue);
    a.secs_opt(UPSTREAM_LOAD, t.load);
    if let Some((gap, share)) = network_and_queue(m) {
        a.float(TTFT_NETWORK_AND_QUEUE, gap.as_secs_f64());
        a.float_opt(NETWORK_QUEUE_SHARE, share);
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
