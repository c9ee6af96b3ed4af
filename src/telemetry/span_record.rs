//! tokentap's own span records: a request's sampling decision and ids in
//! (`SpanStart`, decided at `begin` without an SDK span); one finished
//! `SpanRecord` per sampled request out, queued for the export thread
//! (`span_export`), which turns it into the span's attributes there.
//!
//! The request thread only moves what it already has into the record (the
//! `Measurement`, the cost facts, the SLO mark): names, attribute lists and
//! events are built on the export thread, and only for sampled requests
//! with a span pipeline. With export off no record is built at all.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{Config, SpanData, SpanEvents, SpanLinks};

use super::sampling::{self, Head, Kept, Sampler};
use super::span::{AttributeSink, error_type, finish_attributes, operation_name, start_attributes};
use crate::attrs::*;
use crate::meter::Measurement;
use crate::pricing;

/// Ids and the start of sampling for new spans: random ids, the parent
/// from the context, and what `[telemetry.sampling]` can tell when the
/// request starts (`Head`); the span itself is kept or dropped when it
/// ends (`Sampler::decide`).
#[derive(Debug)]
pub(crate) struct Tracing {
    pub(crate) sampler: Sampler,
    /// `OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT` (128 by default).
    max_attributes: usize,
    /// After `shutdown` new spans get no context, as from a shut-down
    /// SDK provider.
    shut_down: AtomicBool,
}

impl Default for Tracing {
    fn default() -> Self {
        Tracing::new(Sampler::default())
    }
}

/// A span's identity once started: its context, its parent, and what was
/// known of sampling then.
#[derive(Debug, Clone)]
pub(crate) struct SpanStart {
    pub(crate) context: SpanContext,
    pub(crate) parent: SpanId,
    pub(crate) parent_remote: bool,
    /// The start's verdict; the context's sampled flag (sent upstream)
    /// says `head.sampled()`.
    pub(crate) head: Head,
}

impl Tracing {
    pub(crate) fn new(sampler: Sampler) -> Tracing {
        let config = Config::default();
        Tracing {
            sampler,
            max_attributes: config.span_limits.max_attributes_per_span as usize,
            shut_down: AtomicBool::new(false),
        }
    }

    /// Start a CLIENT span under `parent` (the client's extracted context,
    /// or a WebSocket session span's): the parent's trace id or a new one, a new
    /// span id, the parent's trace state, and the sampled flag the start
    /// can already decide (the ratio's pick, or a sampled remote parent
    /// under `respect_parent`).
    pub(crate) fn start(&self, parent: &Context) -> SpanStart {
        if self.shut_down.load(Ordering::Relaxed) {
            return SpanStart {
                context: SpanContext::empty_context(),
                parent: SpanId::INVALID,
                parent_remote: false,
                head: Head::default(),
            };
        }
        let span_id = new_span_id();
        let parent_span = parent.span();
        let psc = parent_span.span_context();
        let (trace_id, psc) = if psc.is_valid() {
            (psc.trace_id(), Some(psc))
        } else {
            (new_trace_id(), None)
        };
        let head = self
            .sampler
            .head(u128::from_be_bytes(trace_id.to_bytes()), psc);
        let flags = psc.map_or(TraceFlags::default(), SpanContext::trace_flags);
        let state = psc.map_or_else(TraceState::default, |p| p.trace_state().clone());
        SpanStart {
            context: SpanContext::new(
                trace_id,
                span_id,
                flags.with_sampled(head.sampled()),
                false,
                state,
            ),
            parent: psc.map_or(SpanId::INVALID, SpanContext::span_id),
            parent_remote: psc.is_some_and(SpanContext::is_remote),
            head,
        }
    }

    /// No new span contexts from now on.
    pub(crate) fn shut_down(&self) {
        self.shut_down.store(true, Ordering::Relaxed);
    }

    pub(crate) fn max_attributes(&self) -> usize {
        self.max_attributes
    }
}

/// `cx` as exported: sampled, with the threshold `kept` was decided at in
/// its trace state (or none, when the probability is not known).
fn exported_context(cx: &SpanContext, kept: &Kept) -> SpanContext {
    if !cx.is_valid() {
        return cx.clone();
    }
    SpanContext::new(
        cx.trace_id(),
        cx.span_id(),
        cx.trace_flags().with_sampled(true),
        cx.is_remote(),
        sampling::with_threshold(cx.trace_state(), kept.th),
    )
}

/// A random non-zero trace id.
fn new_trace_id() -> TraceId {
    TraceId::from(fastrand::u128(1..))
}

/// A random non-zero span id.
fn new_span_id() -> SpanId {
    SpanId::from(fastrand::u64(1..))
}

/// A finished span waiting for export.
#[derive(Debug)]
pub(crate) enum SpanRecord {
    /// A request's (or a WebSocket response's) CLIENT span.
    Request(Box<RequestSpan>),
    /// A WebSocket session's span: rare, so a plain attribute list.
    WsSession(Box<SpanParts>),
}

/// What a request's span is made of; the attributes are written from it
/// on the export thread.
#[derive(Debug)]
pub(crate) struct RequestSpan {
    pub(crate) start: SpanStart,
    pub(crate) m: Measurement,
    /// `tokentap.in_flight` at the start.
    pub(crate) in_flight: u64,
    /// `tokentap.load_class`: the class of `in_flight`.
    pub(crate) load_class: std::sync::Arc<str>,
    /// `tokentap.service_tier`, when known.
    pub(crate) tier: Option<&'static str>,
    pub(crate) cost: Option<SpanCost>,
    /// The SLO mark (`slo`), when any SLO of the route and model is breached.
    pub(crate) slo: Option<KeyValue>,
    /// Why the span is exported and what it stands for.
    pub(crate) kept: Kept,
}

/// The cost facts on a span.
#[derive(Debug, Clone)]
pub(crate) enum SpanCost {
    Priced {
        usd: f64,
        source: &'static str,
        estimated: bool,
        entry: Arc<str>,
        /// The provider-run tool fees inside `usd`, when there were any.
        tools: Option<f64>,
    },
    Unpriced,
}

impl SpanCost {
    /// `tokentap.cost.*`: the amount and where its price came from, or
    /// the unpriced flag.
    fn attributes(&self, a: &mut impl AttributeSink) {
        match self {
            SpanCost::Priced {
                usd,
                source,
                estimated,
                entry,
                tools,
            } => {
                a.float(COST_AMOUNT, *usd);
                a.str(COST_CURRENCY, pricing::CURRENCY);
                a.str(COST_SOURCE, source);
                a.bool(COST_ESTIMATED, *estimated);
                a.str(COST_PRICE_ENTRY, entry);
                a.float_opt(COST_TOOLS, *tools);
            }
            SpanCost::Unpriced => a.bool(COST_UNPRICED, true),
        }
    }
}

/// A WebSocket session's span as recorded. Attributes in order.
#[derive(Debug)]
pub(crate) struct SpanParts {
    pub(crate) start: SpanStart,
    pub(crate) name: String,
    pub(crate) start_time: SystemTime,
    pub(crate) end_time: SystemTime,
    pub(crate) attributes: Vec<KeyValue>,
    /// An error status's description; `None` leaves the status unset.
    pub(crate) error: Option<String>,
    /// Why the span is exported and what it stands for.
    pub(crate) kept: Kept,
}

/// `tokentap.sampling.reason` and, when known, `tokentap.sampling.weight`.
fn sampling_attributes(kept: &Kept, a: &mut impl AttributeSink) {
    a.str(SAMPLING_REASON, kept.reason.as_str());
    a.float_opt(SAMPLING_WEIGHT, kept.weight);
}

/// The span name: operation and requested model (`chat gpt-4o`).
pub(crate) fn span_name(op: &str, model: Option<&str>) -> String {
    match model {
        Some(model) => format!("{op} {model}"),
        None => op.to_owned(),
    }
}

impl RequestSpan {
    /// Every attribute of the span, in the order the SDK span had them:
    /// start attributes, in-flight, service tier and cost, the SLO mark,
    /// the finish attributes, then sampling's reason and weight.
    fn attributes(&self, a: &mut impl AttributeSink) {
        let m = &self.m;
        start_attributes(&m.request, a);
        a.count(IN_FLIGHT, self.in_flight);
        a.str(LOAD_CLASS, &self.load_class);
        if let Some(tier) = self.tier {
            a.str(SERVICE_TIER, tier);
        }
        if let Some(cost) = &self.cost {
            cost.attributes(a);
        }
        if let Some(mark) = &self.slo {
            a.key_value(mark);
        }
        finish_attributes(m, a);
        sampling_attributes(&self.kept, a);
    }
}

/// What a finished span is besides its attributes, borrowed from its
/// record: what both the SDK form and the OTLP encoder (`otlp_wire`) write.
#[derive(Debug)]
pub(crate) struct SpanHead<'a> {
    pub(crate) start: &'a SpanStart,
    /// Why the span was kept, and at which threshold.
    pub(crate) kept: &'a Kept,
    /// The name: a word and, after a space, a model (`chat gpt-4o`).
    pub(crate) name: (&'a str, Option<&'a str>),
    pub(crate) start_time: SystemTime,
    pub(crate) end_time: SystemTime,
    /// The first-token event's time (the one event tokentap's spans have).
    pub(crate) first_token: Option<SystemTime>,
    /// An error status's description; `None` leaves the status unset.
    pub(crate) error: Option<&'a str>,
}

impl SpanHead<'_> {
    /// The exported context: sampled, its trace state carrying the
    /// sampling threshold (`ot=th:…`) when it is known.
    pub(crate) fn context(&self) -> SpanContext {
        exported_context(&self.start.context, self.kept)
    }

    /// The exported context's trace state, as its header: written straight
    /// from the threshold when the request brought no trace state (the
    /// common case), without building a `TraceState`.
    pub(crate) fn trace_state(&self) -> Cow<'static, str> {
        let cx = &self.start.context;
        if cx.is_valid() && *cx.trace_state() == TraceState::default() {
            return match self.kept.th {
                None => Cow::Borrowed(""),
                Some(0) => Cow::Borrowed("ot=th:0"),
                Some(th) => Cow::Owned(format!("ot=th:{}", sampling::th_value(th))),
            };
        }
        Cow::Owned(self.context().trace_state().header())
    }
}

impl SpanRecord {
    /// The span's identity, name, times, event and status.
    pub(crate) fn head(&self) -> SpanHead<'_> {
        match self {
            SpanRecord::Request(r) => {
                let m = &r.m;
                let start = m.request.start_wall;
                SpanHead {
                    start: &r.start,
                    kept: &r.kept,
                    name: (
                        operation_name(&m.request),
                        m.request.request_model.as_deref(),
                    ),
                    start_time: start,
                    end_time: start + m.duration,
                    first_token: m.time_to_first_token.map(|ttft| start + ttft),
                    error: error_type(m),
                }
            }
            SpanRecord::WsSession(s) => SpanHead {
                start: &s.start,
                kept: &s.kept,
                name: (&s.name, None),
                start_time: s.start_time,
                end_time: s.end_time,
                first_token: None,
                error: s.error.as_deref(),
            },
        }
    }

    /// The span's attributes, in order, into `a`.
    pub(crate) fn attributes(&self, a: &mut impl AttributeSink) {
        match self {
            SpanRecord::Request(r) => r.attributes(a),
            SpanRecord::WsSession(s) => {
                s.attributes.iter().for_each(|kv| a.key_value(kv));
                sampling_attributes(&s.kept, a);
            }
        }
    }

    /// The SDK's form of this span, at most `max_attributes` kept, for
    /// `SpanExporter`s.
    pub(crate) fn span_data(
        &self,
        scope: &InstrumentationScope,
        max_attributes: usize,
    ) -> SpanData {
        let mut attributes = Vec::new();
        self.attributes(&mut attributes);
        let dropped = attributes.len().saturating_sub(max_attributes);
        attributes.truncate(max_attributes);
        let head = self.head();
        let mut events = SpanEvents::default();
        if let Some(at) = head.first_token {
            events
                .events
                .push(Event::new(EVENT_FIRST_TOKEN, at, Vec::new(), 0));
        }
        SpanData {
            span_context: head.context(),
            parent_span_id: head.start.parent,
            parent_span_is_remote: head.start.parent_remote,
            span_kind: SpanKind::Client,
            name: Cow::Owned(span_name(head.name.0, head.name.1)),
            start_time: head.start_time,
            end_time: head.end_time,
            attributes,
            dropped_attributes_count: u32::try_from(dropped).unwrap_or(u32::MAX),
            events,
            links: SpanLinks::default(),
            status: head
                .error
                .map_or(Status::Unset, |e| Status::error(e.to_owned())),
            instrumentation_scope: scope.clone(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests build timestamps freely")]
pub(crate) mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use http::HeaderMap;
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{Span as _, TraceState, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use opentelemetry_sdk::trace::{IdGenerator, InMemorySpanExporter, SdkTracerProvider};

    use super::super::sampling::Reason;
    use super::super::span::{TraceHeaders, inject_trace_context};
    use super::super::tests::{facts, measurement};
    use super::*;
    use crate::config::SamplingConfig;
    use crate::meter::{Outcome, Unmetered};

    fn tracing(ratio: f64, respect_parent: bool) -> Tracing {
        Tracing::new(Sampler::new(&SamplingConfig {
            ratio,
            respect_parent,
            ..SamplingConfig::default()
        }))
    }

    /// Hands the SDK the ids tokentap's own path picked.
    #[derive(Debug)]
    struct Fixed(TraceId, SpanId);
    impl IdGenerator for Fixed {
        fn new_trace_id(&self) -> TraceId {
            self.0
        }
        fn new_span_id(&self) -> SpanId {
            self.1
        }
    }

    fn scope() -> InstrumentationScope {
        InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build()
    }

    fn parent(header: Option<&str>) -> Context {
        let mut h = HeaderMap::new();
        if let Some(tp) = header {
            h.insert("traceparent", tp.parse().expect("hv"));
            h.insert("tracestate", "vendor=abc".parse().expect("hv"));
        }
        TraceContextPropagator::new().extract(&TraceHeaders(&h))
    }

    /// The span as the SDK path before this change built it: the same
    /// builder, attribute calls and end as `begin_in`, `record_cost`, the
    /// SLO mark and `end_span` made.
    fn by_sdk(r: &RequestSpan, cx: &Context) -> Option<SpanData> {
        let spans = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .with_id_generator(Fixed(r.start.context.trace_id(), r.start.context.span_id()))
            .build();
        let tracer = provider.tracer_with_scope(scope());
        let m = &r.m;
        let facts = &m.request;
        let op = operation_name(facts);
        let name = span_name(op, facts.request_model.as_deref());
        let mut start = Vec::new();
        start_attributes(facts, &mut start);
        start.push(KeyValue::new(IN_FLIGHT, r.in_flight as i64));
        start.push(KeyValue::new(LOAD_CLASS, r.load_class.clone()));
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(facts.start_wall)
            .with_attributes(start)
            .start_with_context(&tracer, cx);
        if let Some(tier) = r.tier {
            span.set_attribute(KeyValue::new(SERVICE_TIER, tier));
        }
        if let Some(cost) = &r.cost {
            let mut attributes = Vec::new();
            cost.attributes(&mut attributes);
            span.set_attributes(attributes);
        }
        if let Some(mark) = &r.slo {
            span.set_attribute(mark.clone());
        }
        let begin = m.request.start_wall;
        let mut finish = Vec::new();
        finish_attributes(m, &mut finish);
        sampling_attributes(&r.kept, &mut finish);
        span.set_attributes(finish);
        if let Some(ttft) = m.time_to_first_token {
            span.add_event_with_timestamp(EVENT_FIRST_TOKEN, begin + ttft, Vec::new());
        }
        if let Some(err) = error_type(m) {
            span.set_status(Status::error(err.to_owned()));
        }
        span.end_with_timestamp(begin + m.duration);
        let mut got = spans.get_finished_spans().expect("spans");
        assert!(got.len() <= 1);
        // The exported context carries the sampling threshold.
        got.pop().map(|mut s| {
            s.span_context = exported_context(&s.span_context, &r.kept);
            s
        })
    }

    /// Request spans under `cx` for every measurement, with and without an
    /// SLO mark, kept for `reason`.
    fn request_spans(tracing: &Tracing, cx: &Context, reason: Reason) -> Vec<RequestSpan> {
        let mut out = Vec::new();
        for (m, tier, cost) in measurements() {
            for slo in [None, Some(KeyValue::new("tokentap.slo.breached", "p95"))] {
                out.push(RequestSpan {
                    start: tracing.start(cx),
                    m: m.clone(),
                    in_flight: 3,
                    load_class: "2-8".into(),
                    tier,
                    cost: cost.clone(),
                    slo,
                    kept: Kept::always(reason),
                });
            }
        }
        out
    }

    /// Measurements covering every optional part of the span.
    fn measurements() -> Vec<(Measurement, Option<&'static str>, Option<SpanCost>)> {
        let mut out = Vec::new();
        let mut plain = measurement(facts(Some("gpt-4o"), Some("team-a"), false));
        plain.request.session = Some("sess-é".into());
        out.push((plain.clone(), None, None));
        let mut streamed = measurement(facts(None, None, true));
        streamed.modalities.input_text = Some(10);
        streamed.modalities.output_audio = Some(3);
        streamed.upstream_timing.ttft = Some(Duration::from_millis(50));
        streamed.upstream_timing.total = Some(Duration::from_millis(600));
        streamed.upstream_timing.queue = Some(Duration::from_millis(5));
        streamed.pool_wait = Some(Duration::from_micros(30));
        streamed.request_overhead = Some(Duration::from_micros(70));
        let priced = SpanCost::Priced {
            usd: 0.00125,
            source: "builtin",
            estimated: false,
            entry: "openai/gpt-4o@2025-01-01".into(),
            tools: Some(0.02),
        };
        streamed.tools.record_call(Some("get_weather"));
        streamed.tools.record_call(Some("get_weather"));
        streamed.tools.record_call(None);
        streamed.tools.server.web_search = 2;
        out.push((streamed, Some("priority"), Some(priced)));
        let mut failed = measurement(facts(Some("m"), None, true));
        failed.outcome = Outcome::UpstreamError;
        failed.status = 502;
        failed.error_type = Some("rate_limit".into());
        failed.time_to_first_token = None;
        failed.malformed_events = 2;
        failed.unmetered = Some(Unmetered::Encoding("br".into()));
        failed.finish_reasons.clear();
        out.push((failed, None, Some(SpanCost::Unpriced)));
        let mut timeout = measurement(facts(Some("m"), Some("t"), false));
        timeout.outcome = Outcome::UpstreamTimeout;
        timeout.error_type = None;
        timeout.reasoning = Default::default();
        out.push((timeout, Some("flex"), None));
        out
    }

    /// Sampled records of every shape: the measurements above under no
    /// parent and a remote sampled one (with a trace state), with and
    /// without an SLO mark, one with a sampler's attribute; and WebSocket session
    /// spans, ended, failed (with an array attribute) and dropped.
    pub(crate) fn records() -> Vec<SpanRecord> {
        let tracing = Tracing::default();
        let mut out = Vec::new();
        for header in [
            None,
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ] {
            let cx = parent(header);
            for r in request_spans(&tracing, &cx, Reason::All) {
                out.push(SpanRecord::Request(Box::new(r)));
            }
        }
        // A parent's decision without a threshold (no `th`, no weight),
        // and one picked by a ratio.
        if let Some(SpanRecord::Request(r)) = out.get_mut(1) {
            r.kept = Kept {
                reason: Reason::Parent,
                th: None,
                weight: None,
            };
        }
        if let Some(SpanRecord::Request(r)) = out.get_mut(2) {
            r.kept = Kept {
                reason: Reason::Ratio,
                th: sampling::threshold(0.01),
                weight: Some(99.99771123402633),
            };
        }
        let session = |error: Option<&str>, attributes: Vec<KeyValue>| {
            SpanRecord::WsSession(Box::new(SpanParts {
                start: tracing.start(&Context::new()),
                name: "websocket gpt-4o-realtime".into(),
                start_time: UNIX_EPOCH + Duration::from_millis(1_764_000_000_000),
                end_time: UNIX_EPOCH + Duration::from_millis(1_764_000_004_500),
                attributes,
                error: error.map(str::to_owned),
                kept: Kept::always(Reason::Response),
            }))
        };
        out.push(session(
            None,
            vec![
                KeyValue::new("tokentap.session.responses", 4_i64),
                KeyValue::new("tokentap.tenant", "équipe-東京-🚀"),
                KeyValue::new("tokentap.route", ""),
            ],
        ));
        out.push(session(
            Some("handshake_failed: é"),
            vec![
                KeyValue::new(
                    "list",
                    opentelemetry::Value::Array(opentelemetry::Array::String(vec![
                        "a".into(),
                        "".into(),
                        "長さ".into(),
                    ])),
                ),
                KeyValue::new(
                    "ints",
                    opentelemetry::Value::Array(vec![0_i64, -1, i64::MAX].into()),
                ),
                KeyValue::new("f", -2.5_f64),
                KeyValue::new("b", false),
            ],
        ));
        out.push(session(None, Vec::new()));
        out
    }

    #[test]
    fn records_make_the_span_the_sdk_path_made() {
        let tracing = Tracing::default();
        let parents = [
            None,
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"),
        ];
        let mut n = 0;
        for header in parents {
            let cx = parent(header);
            for record in request_spans(&tracing, &cx, Reason::Error) {
                let Some(sdk) = by_sdk(&record, &cx) else {
                    // The SDK's parent-based sampler exported nothing.
                    assert!(header.is_some_and(|h| h.ends_with("-00")));
                    continue;
                };
                assert!(record.start.context.is_sampled());
                let exported = exported_context(&record.start.context, &record.kept);
                assert_eq!(exported, sdk.span_context, "{header:?}");
                assert_eq!(exported.trace_state().get("ot"), Some("th:0"));
                let ours = SpanRecord::Request(Box::new(record)).span_data(&scope(), 128);
                assert_eq!(ours, sdk, "{header:?}");
                n += 1;
            }
        }
        assert_eq!(n, 16, "two sampled parents (none, sampled) x 8");
    }

    #[test]
    fn ratio_zero_flags_nothing_but_still_injects_a_traceparent() {
        let t = tracing(0.0, false);
        let s = t.start(&Context::new());
        assert!(!s.head.sampled());
        assert!(s.context.is_valid());
        let mut h = HeaderMap::new();
        inject_trace_context(&s.context, &mut h);
        let tp = h["traceparent"].to_str().expect("ascii");
        assert!(tp.ends_with("-00"), "{tp}");
        assert_eq!(&tp[3..35], s.context.trace_id().to_string());
    }

    #[test]
    fn the_upstream_flag_is_the_ratio_pick_from_the_trace_id() {
        for ratio in [0.0, 0.25, 1.0] {
            let t = tracing(ratio, false);
            let th = sampling::threshold(ratio);
            let mut sampled = 0;
            for _ in 0..400 {
                let s = t.start(&Context::new());
                let rv =
                    u128::from_be_bytes(s.context.trace_id().to_bytes()) as u64 & ((1 << 56) - 1);
                let want = th.is_some_and(|th| rv >= th);
                assert_eq!(s.head.by_ratio, want);
                assert_eq!(s.context.is_sampled(), want);
                sampled += usize::from(want);
            }
            match ratio {
                0.0 => assert_eq!(sampled, 0),
                1.0 => assert_eq!(sampled, 400),
                _ => assert!((40..=160).contains(&sampled), "{sampled} of 400 at 0.25"),
            }
        }
    }

    #[test]
    fn respect_parent_follows_sampled_remote_parents_and_keeps_their_state() {
        let t = tracing(0.0, true);
        let on = t.start(&parent(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )));
        assert!(on.head.by_parent && on.context.is_sampled());
        assert!(on.parent_remote);
        assert_eq!(
            on.parent,
            SpanId::from_hex("00f067aa0ba902b7").expect("hex")
        );
        assert_eq!(
            on.context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("hex")
        );
        assert_eq!(on.context.trace_state().header(), "vendor=abc");
        let off = t.start(&parent(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        )));
        assert!(!off.head.sampled() && !off.context.is_sampled());
        assert!(off.parent_remote);
        let root = t.start(&Context::new());
        assert!(!root.head.sampled(), "no parent: ratio 0");
        assert_eq!(root.parent, SpanId::INVALID);
        assert!(!root.parent_remote);
        assert_eq!(root.context.trace_state(), &TraceState::default());
        let ignored = tracing(0.0, false).start(&parent(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )));
        assert!(!ignored.context.is_sampled(), "respect_parent off");
    }

    #[test]
    fn a_local_parent_is_not_remote_and_shutdown_gives_no_context() {
        let t = Tracing::default();
        let session = t.start(&Context::new());
        let cx = Context::new().with_remote_span_context(session.context.clone());
        let child = t.start(&cx);
        assert_eq!(child.parent, session.context.span_id());
        assert!(!child.parent_remote, "a session parent is local");
        assert_eq!(child.context.trace_id(), session.context.trace_id());
        t.shut_down();
        assert!(!t.start(&Context::new()).context.is_valid());
    }
}
