//! Tests for `telemetry`: in-memory exporters in, assertions on the spans,
//! metrics and drop counts that come out.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::HeaderMap;
use opentelemetry::trace::{SpanKind, Status, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, Temporality};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData, SpanExporter};

use super::instruments::*;
use crate::attrs::*;
use opentelemetry::propagation::Extractor as _;

use super::span::TraceHeaders;
use super::*;
use crate::config::{LogFormat, OtlpProtocol, TelemetryConfig};
use crate::meter::{Measurement, Outcome, Reasoning, RequestBody, RequestFacts, TokenSource};
use crate::providers::{Operation, ProviderKind, Usage};
use crate::ship::init_logging;
use crate::ship::prometheus;

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

pub(crate) fn config() -> TelemetryConfig {
    TelemetryConfig {
        otlp_certificate: None,
        otlp_client_certificate: None,
        otlp_client_key: None,
        otlp_enabled: Some(false),
        service_name: "tokentap-test".into(),
        resource_attributes: vec![("deployment.environment.name".into(), "test".into())],
        metrics_export_interval: Duration::from_secs(3600),
        max_models: 10,
        max_tenants: 10,
        ..TelemetryConfig::default()
    }
}

struct Harness {
    telemetry: Telemetry,
    spans: InMemorySpanExporter,
    metrics: InMemoryMetricExporter,
}

fn harness(cfg: TelemetryConfig) -> Harness {
    let spans = InMemorySpanExporter::default();
    let metrics = InMemoryMetricExporter::default();
    let telemetry = Telemetry::init_with(&cfg, spans.clone(), metrics.clone());
    Harness {
        telemetry,
        spans,
        metrics,
    }
}

impl Harness {
    fn finished_spans(&self) -> Vec<SpanData> {
        self.telemetry.flush();
        self.spans.get_finished_spans().expect("in-memory spans")
    }

    /// The latest cumulative collection.
    fn collect(&self) -> ResourceMetrics {
        self.telemetry.flush();
        let mut all = self
            .metrics
            .get_finished_metrics()
            .expect("in-memory metrics");
        all.pop().expect("at least one collection after flush")
    }
}

pub(crate) fn facts(model: Option<&str>, tenant: Option<&str>, stream: bool) -> RequestFacts {
    RequestFacts {
        route: Arc::from("openai"),
        route_labels: Default::default(),
        provider: ProviderKind::Openai,
        operation: Some(Operation::ChatCompletions),
        request_model: model.map(str::to_owned),
        stream,
        tenant: tenant.map(str::to_owned),
        session: None,
        server_address: Arc::from("api.openai.com"),
        server_port: 443,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        start: Instant::now(),
    }
}

pub(crate) fn measurement(request: RequestFacts) -> Measurement {
    Measurement {
        response_model: Some("gpt-4o-2024-08-06".into()),
        response_id: Some("chatcmpl-1".into()),
        finish_reasons: vec!["stop".into()],
        usage: Usage {
            input: Some(12),
            output: Some(11),
            cache_read: Some(4),
            cache_creation: None,
            reasoning: Some(2),
            ..Usage::default()
        },
        output_tokens: Some(11),
        token_source: Some(TokenSource::Provider),
        content_chunks: 11,
        time_to_headers: Some(Duration::from_millis(100)),
        time_to_first_byte: Some(Duration::from_millis(150)),
        time_to_first_token: Some(Duration::from_millis(200)),
        time_to_last_token: Some(Duration::from_millis(700)),
        reasoning: Reasoning {
            time_to_first_visible: Some(Duration::from_millis(450)),
            time_to_first_reasoning: Some(Duration::from_millis(200)),
            tokens: Some(2),
            source: Some(TokenSource::Provider),
        },
        duration: Duration::from_millis(750),
        max_gap: Some(Duration::from_millis(80)),
        response_bytes: 2048,
        ..Measurement::empty(request)
    }
}

fn traceparent_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        "traceparent",
        format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01")
            .parse()
            .expect("hv"),
    );
    h.insert("tracestate", "vendor=abc".parse().expect("hv"));
    h.insert(
        "authorization",
        "Bearer sk-secret-value".parse().expect("hv"),
    );
    h
}

fn run(t: &Telemetry, facts: RequestFacts, headers: &HeaderMap, gaps: &[u64]) -> Measurement {
    let mut rec = Box::new(t.begin(&facts, headers));
    for g in gaps {
        rec.chunk_gap(Duration::from_millis(*g));
    }
    let m = measurement(facts);
    rec.finish(m.clone());
    m
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

/// (bounds, attributes, count, sum) of every data point of a histogram.
type Points = Vec<(Vec<f64>, Vec<KeyValue>, u64, f64)>;

fn histogram(rm: &ResourceMetrics, name: &str) -> (String, Points) {
    let metric = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("metric {name} not exported"));
    let points = match metric.data() {
        AggregatedMetrics::F64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| {
                (
                    p.bounds().collect(),
                    p.attributes().cloned().collect(),
                    p.count(),
                    p.sum(),
                )
            })
            .collect(),
        AggregatedMetrics::U64(MetricData::Histogram(h)) => h
            .data_points()
            .map(|p| {
                (
                    p.bounds().collect(),
                    p.attributes().cloned().collect(),
                    p.count(),
                    p.sum() as f64,
                )
            })
            .collect(),
        other => panic!("{name} is not a histogram: {other:?}"),
    };
    (metric.unit().to_owned(), points)
}

fn sum_points(rm: &ResourceMetrics, name: &str) -> Vec<(Vec<KeyValue>, i128)> {
    let metric = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .find(|m| m.name() == name)
        .unwrap_or_else(|| panic!("metric {name} not exported"));
    match metric.data() {
        AggregatedMetrics::U64(MetricData::Sum(s)) => s
            .data_points()
            .map(|p| (p.attributes().cloned().collect(), p.value() as i128))
            .collect(),
        AggregatedMetrics::I64(MetricData::Sum(s)) => s
            .data_points()
            .map(|p| (p.attributes().cloned().collect(), p.value() as i128))
            .collect(),
        other => panic!("{name} is not a sum: {other:?}"),
    }
}

#[test]
fn span_continues_client_trace_with_genai_name_kind_and_times() {
    let h = harness(config());
    let f = facts(Some("gpt-4o"), Some("team-a"), true);
    let start = f.start_wall;
    run(&h.telemetry, f, &traceparent_headers(), &[]);
    let spans = h.finished_spans();
    assert_eq!(spans.len(), 1, "one span per request");
    let s = &spans[0];
    assert_eq!(
        s.name, "chat gpt-4o",
        "span name is `{{operation}} {{model}}`"
    );
    assert_eq!(s.span_kind, SpanKind::Client);
    assert_eq!(
        s.span_context.trace_id(),
        TraceId::from_hex(PARENT_TRACE).expect("hex")
    );
    assert_eq!(
        s.parent_span_id.to_string(),
        PARENT_SPAN,
        "parent is the client's span"
    );
    assert!(s.parent_span_is_remote, "parent came from traceparent");
    assert_eq!(
        s.span_context.trace_state().header(),
        "ot=th:0,vendor=abc",
        "tracestate carried over, the sampling threshold added (ratio 1: th 0)"
    );
    assert_eq!(
        s.start_time, start,
        "span starts at the request's wall time"
    );
    assert_eq!(
        s.end_time,
        start + Duration::from_millis(750),
        "span ends at start + duration"
    );
    assert_eq!(
        s.status,
        Status::Unset,
        "complete request leaves status unset"
    );
    let ev = s.events.events.first().expect("first-token event");
    assert_eq!(ev.name, EVENT_FIRST_TOKEN);
    assert_eq!(
        ev.timestamp,
        start + Duration::from_millis(200),
        "event at start + TTFT"
    );
}

#[test]
fn span_without_model_or_parent_is_a_root_named_after_operation() {
    let h = harness(config());
    run(
        &h.telemetry,
        facts(None, None, false),
        &HeaderMap::new(),
        &[],
    );
    let s = &h.finished_spans()[0];
    assert_eq!(s.name, "chat", "no model: span name is the operation");
    assert_eq!(
        s.parent_span_id,
        opentelemetry::trace::SpanId::INVALID,
        "no traceparent: root span"
    );
}

#[test]
fn span_attributes_follow_conventions_and_keep_real_tenant() {
    let mut cfg = config();
    cfg.max_tenants = 0; // every metric tenant becomes `other`; spans keep the real one
    let h = harness(cfg);
    run(
        &h.telemetry,
        facts(Some("gpt-4o"), Some("team-a"), true),
        &traceparent_headers(),
        &[],
    );
    let s = &h.finished_spans()[0];
    let a = &s.attributes;
    let expect: [(&str, Value); 25] = [
        (GEN_AI_OPERATION_NAME, "chat".into()),
        (GEN_AI_PROVIDER_NAME, "openai".into()),
        (GEN_AI_REQUEST_MODEL, "gpt-4o".into()),
        (GEN_AI_RESPONSE_MODEL, "gpt-4o-2024-08-06".into()),
        (GEN_AI_RESPONSE_ID, "chatcmpl-1".into()),
        (GEN_AI_USAGE_INPUT_TOKENS, 12i64.into()),
        (GEN_AI_USAGE_OUTPUT_TOKENS, 11i64.into()),
        (GEN_AI_USAGE_CACHE_READ, 4i64.into()),
        (GEN_AI_USAGE_REASONING, 2i64.into()),
        (GEN_AI_REQUEST_STREAM, true.into()),
        (GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, 0.2.into()),
        (SERVER_ADDRESS, "api.openai.com".into()),
        (SERVER_PORT, 443i64.into()),
        (HTTP_RESPONSE_STATUS_CODE, 200i64.into()),
        (ROUTE, "openai".into()),
        (TENANT, "team-a".into()),
        (OUTCOME, "complete".into()),
        (TOKENS_ESTIMATED, false.into()),
        (TOKENS_SOURCE, "provider".into()),
        (TTFB, 0.15.into()),
        (REQUEST_BODY, "sniffed".into()),
        (TIME_TO_FIRST_VISIBLE, 0.45.into()),
        (TIME_TO_FIRST_REASONING, 0.2.into()),
        (REASONING_DURATION, 0.25.into()),
        (REASONING_ESTIMATED, false.into()),
    ];
    for (key, want) in expect {
        assert_eq!(attr(a, key), Some(&want), "span attribute {key}");
    }
    let reasons = attr(a, GEN_AI_RESPONSE_FINISH_REASONS).expect("finish reasons");
    assert_eq!(
        reasons.as_str(),
        "[\"stop\"]",
        "finish reasons is a string array"
    );
    let Some(Value::F64(tps)) = attr(a, DECODE_TPS) else {
        panic!("decode tps is a double")
    };
    assert!(
        (tps - 20.0).abs() < 1e-9,
        "decode tps = 10 / 0.5 s, got {tps}"
    );
    assert_eq!(
        attr(a, MAX_STALL),
        Some(&Value::F64(0.08)),
        "max stall in seconds"
    );
    assert_eq!(attr(a, ERROR_TYPE), None, "no error.type on success");
    assert_eq!(
        attr(a, GEN_AI_USAGE_CACHE_WRITE),
        None,
        "unreported usage is absent"
    );
    for kv in a {
        assert!(
            !kv.value.as_str().contains("sk-secret"),
            "header value leaked into {}",
            kv.key
        );
    }
}

#[test]
fn failed_request_sets_error_status_and_type() {
    let h = harness(config());
    let f = facts(Some("gpt-4o"), None, true);
    let mut rec = Box::new(h.telemetry.begin(&f, &HeaderMap::new()));
    let mut m = measurement(f);
    m.outcome = Outcome::UpstreamError;
    m.status = 502;
    m.error_type = Some("overloaded_error".into());
    rec.chunk_gap(Duration::from_millis(5));
    rec.finish(m);
    let s = &h.finished_spans()[0];
    assert_eq!(
        s.status,
        Status::error("overloaded_error"),
        "error status with error.type"
    );
    assert_eq!(
        attr(&s.attributes, ERROR_TYPE),
        Some(&Value::from("overloaded_error"))
    );
    let rm = h.collect();
    let (_, points) = histogram(&rm, M_INFERENCE_DURATION);
    let p = &points[0].1;
    assert_eq!(
        attr(p, ERROR_TYPE),
        Some(&Value::from("overloaded_error")),
        "metric error.type"
    );
    assert_eq!(
        attr(p, OUTCOME),
        Some(&Value::from("upstream_error")),
        "metric outcome"
    );
}

#[test]
fn inject_writes_this_spans_traceparent() {
    let h = harness(config());
    let f = facts(Some("gpt-4o"), None, true);
    let rec = h.telemetry.begin(&f, &traceparent_headers());
    let mut upstream = HeaderMap::new();
    rec.inject(&mut upstream);
    Box::new(rec).finish(measurement(f));
    let s = &h.finished_spans()[0];
    let tp = upstream
        .get("traceparent")
        .expect("traceparent injected")
        .to_str()
        .expect("ascii");
    let want = format!(
        "00-{}-{}-01",
        s.span_context.trace_id(),
        s.span_context.span_id()
    );
    assert_eq!(tp, want, "upstream traceparent names the proxy span");
    assert_eq!(
        upstream.get("tracestate").map(|v| v.to_str().ok()),
        Some(Some("vendor=abc"))
    );
    assert!(
        upstream.get("authorization").is_none(),
        "inject writes only trace headers"
    );
}

#[test]
fn inject_without_tracestate_sends_no_empty_header() {
    let h = harness(config());
    let f = facts(None, None, false);
    let rec = h.telemetry.begin(&f, &HeaderMap::new());
    let mut upstream = HeaderMap::new();
    rec.inject(&mut upstream);
    assert!(
        upstream.contains_key("traceparent"),
        "root span still propagates"
    );
    assert!(
        !upstream.contains_key("tracestate"),
        "empty tracestate is not sent"
    );
}

#[test]
fn extractor_sees_only_trace_headers() {
    let headers = traceparent_headers();
    let x = TraceHeaders(&headers);
    assert_eq!(
        x.get("authorization"),
        None,
        "authorization is invisible to telemetry"
    );
    let mut keys = x.keys();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["traceparent", "tracestate"],
        "only trace headers are listed"
    );
}

#[test]
fn metrics_have_semconv_names_units_buckets_and_attributes() {
    let h = harness(config());
    run(
        &h.telemetry,
        facts(Some("gpt-4o"), Some("team-a"), true),
        &HeaderMap::new(),
        &[5, 20],
    );
    let rm = h.collect();
    let cases: [(&str, &str, &[f64]); 11] = [
        (M_INFERENCE_DURATION, "s", &DURATION_BUCKETS),
        (M_SERVER_REQUEST_DURATION, "s", &DURATION_BUCKETS),
        (M_INFERENCE_TIME_TO_FIRST_CHUNK, "s", &DURATION_BUCKETS),
        (M_INFERENCE_TIME_PER_OUTPUT_CHUNK, "s", &DURATION_BUCKETS),
        (M_SERVER_TTFT, "s", &TTFT_BUCKETS),
        (M_SERVER_TPOT, "s", &TPOT_BUCKETS),
        (M_OPERATION_INPUT_TOKENS, "{token}", &TOKEN_BUCKETS),
        (M_OPERATION_OUTPUT_TOKENS, "{token}", &TOKEN_BUCKETS),
        (M_DECODE_TPS, "{token}/s", &TPS_BUCKETS),
        (M_CHUNK_GAP, "s", &GAP_BUCKETS),
        (M_MAX_STALL, "s", &STALL_BUCKETS),
    ];
    for (name, unit, buckets) in cases {
        let (u, points) = histogram(&rm, name);
        assert_eq!(u, unit, "{name} unit");
        assert!(!points.is_empty(), "{name} recorded");
        assert_eq!(points[0].0, buckets, "{name} bucket boundaries");
        let a = &points[0].1;
        for (key, want) in [
            (GEN_AI_OPERATION_NAME, Value::from("chat")),
            (GEN_AI_PROVIDER_NAME, "openai".into()),
            (GEN_AI_REQUEST_MODEL, "gpt-4o".into()),
            (SERVER_ADDRESS, "api.openai.com".into()),
            (SERVER_PORT, 443i64.into()),
            (ROUTE, "openai".into()),
            (TENANT, "team-a".into()),
            (GEN_AI_REQUEST_STREAM, true.into()),
        ] {
            assert_eq!(attr(a, key), Some(&want), "{name} attribute {key}");
        }
    }
    let (_, gaps) = histogram(&rm, M_CHUNK_GAP);
    assert_eq!(gaps[0].2, 2, "two chunk gaps recorded");
    assert!((gaps[0].3 - 0.025).abs() < 1e-9, "gap sum 5 ms + 20 ms");

    let (_, dur) = histogram(&rm, M_INFERENCE_DURATION);
    let a = &dur[0].1;
    assert_eq!(attr(a, OUTCOME), Some(&Value::from("complete")));
    assert_eq!(attr(a, TOKENS_ESTIMATED), Some(&Value::from(false)));
    assert_eq!(
        attr(a, GEN_AI_RESPONSE_MODEL),
        Some(&Value::from("gpt-4o-2024-08-06"))
    );
    assert_eq!(attr(a, ERROR_TYPE), None, "no error.type on success");
    assert!((dur[0].3 - 0.75).abs() < 1e-9, "duration in seconds");

    for (name, want) in [
        (M_OPERATION_INPUT_TOKENS, 12.0),
        (M_OPERATION_OUTPUT_TOKENS, 11.0),
    ] {
        let (_, points) = histogram(&rm, name);
        assert_eq!(
            points.iter().map(|p| (p.2, p.3)).collect::<Vec<_>>(),
            [(1, want)],
            "{name}: one request of {want} tokens"
        );
        assert_eq!(attr(&points[0].1, GEN_AI_TOKEN_TYPE), None, "{name}");
    }

    let requests = sum_points(&rm, M_REQUESTS);
    assert_eq!(
        requests.iter().map(|p| p.1).sum::<i128>(),
        1,
        "one request counted"
    );
    let active = sum_points(&rm, M_STREAMS_ACTIVE);
    assert_eq!(
        active.iter().map(|p| p.1).sum::<i128>(),
        0,
        "no request left active"
    );
    let dropped = sum_points(&rm, M_TELEMETRY_DROPPED);
    assert_eq!(
        dropped.len(),
        2,
        "dropped counter has a spans and a metrics series"
    );
}

#[test]
fn non_streaming_request_records_no_streaming_instruments() {
    let h = harness(config());
    run(
        &h.telemetry,
        facts(Some("gpt-4o"), None, false),
        &HeaderMap::new(),
        &[5],
    );
    let rm = h.collect();
    let names: Vec<&str> = rm
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| m.name())
        .collect();
    for name in [
        M_INFERENCE_TIME_TO_FIRST_CHUNK,
        M_INFERENCE_TIME_PER_OUTPUT_CHUNK,
        M_TIME_TO_FIRST_CHUNK,
        M_TIME_PER_OUTPUT_CHUNK,
        M_CHUNK_GAP,
        M_MAX_STALL,
    ] {
        assert!(
            !names.contains(&name),
            "{name} must not be recorded for a non-streaming request"
        );
    }
    assert!(
        names.contains(&M_SERVER_TTFT),
        "TTFT (time to full body) still recorded"
    );
}

#[test]
fn active_requests_go_up_on_begin_and_down_on_finish_or_drop() {
    let h = harness(config());
    let f = facts(Some("gpt-4o"), None, true);
    let open = h.telemetry.begin(&f, &HeaderMap::new());
    let dropped = h.telemetry.begin(&f, &HeaderMap::new());
    let rm = h.collect();
    let total = |rm: &ResourceMetrics| {
        sum_points(rm, M_STREAMS_ACTIVE)
            .iter()
            .map(|p| p.1)
            .sum::<i128>()
    };
    assert_eq!(total(&rm), 2, "two requests in flight");
    drop(dropped);
    Box::new(open).finish(measurement(f));
    assert_eq!(
        total(&h.collect()),
        0,
        "finish and drop both end the request"
    );
}

#[test]
fn model_and_tenant_caps_map_new_values_to_other() {
    let mut cfg = config();
    cfg.max_models = 1;
    cfg.max_tenants = 1;
    let h = harness(cfg);
    run(
        &h.telemetry,
        facts(Some("m1"), Some("t1"), false),
        &HeaderMap::new(),
        &[],
    );
    run(
        &h.telemetry,
        facts(Some("m2"), Some("t2"), false),
        &HeaderMap::new(),
        &[],
    );
    run(
        &h.telemetry,
        facts(Some("m1"), Some("t1"), false),
        &HeaderMap::new(),
        &[],
    );
    let rm = h.collect();
    let (_, points) = histogram(&rm, M_INFERENCE_DURATION);
    let count = |model: &str, tenant: &str| {
        points
            .iter()
            .filter(|p| {
                attr(&p.1, GEN_AI_REQUEST_MODEL) == Some(&Value::from(model.to_owned()))
                    && attr(&p.1, TENANT) == Some(&Value::from(tenant.to_owned()))
            })
            .map(|p| p.2)
            .sum::<u64>()
    };
    assert_eq!(count("m1", "t1"), 2, "first model/tenant keep their values");
    assert_eq!(count(OTHER, OTHER), 1, "values past the cap become `other`");
    assert_eq!(points.len(), 2, "no series for m2/t2");
    let spans = h.finished_spans();
    let tenants: Vec<_> = spans
        .iter()
        .filter_map(|s| attr(&s.attributes, TENANT))
        .collect();
    assert!(
        tenants.contains(&&Value::from("t2")),
        "span keeps the real tenant past the cap"
    );
}

/// A span exporter whose exports always fail.
#[derive(Debug)]
struct FailingSpans;

impl SpanExporter for FailingSpans {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure("collector down".into()))
    }
}

/// A metric exporter whose exports always fail.
#[derive(Debug)]
struct FailingMetrics;

impl PushMetricExporter for FailingMetrics {
    async fn export(&self, _metrics: &ResourceMetrics) -> OTelSdkResult {
        Err(OTelSdkError::InternalFailure("collector down".into()))
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

#[test]
fn failed_exports_are_counted_as_dropped() {
    let t = Telemetry::init_with(&config(), FailingSpans, FailingMetrics);
    assert_eq!(
        t.dropped(),
        Dropped::default(),
        "nothing dropped before any export"
    );
    for _ in 0..3 {
        run(
            &t,
            facts(Some("gpt-4o"), None, true),
            &HeaderMap::new(),
            &[5],
        );
    }
    t.flush();
    let d = t.dropped();
    assert_eq!(d.spans, 3, "three spans in the failed export");
    assert!(
        d.data_points > 10,
        "every data point of the failed collection counted, got {}",
        d.data_points
    );
}

#[test]
fn otlp_disabled_still_serves_spans_and_metrics_api() {
    let t = Telemetry::init(&config()).expect("init without OTLP");
    let f = facts(Some("gpt-4o"), None, true);
    let mut rec = Box::new(t.begin(&f, &traceparent_headers()));
    let mut up = HeaderMap::new();
    rec.inject(&mut up);
    let tp = up
        .get("traceparent")
        .expect("trace context propagates without export");
    assert!(
        tp.to_str().expect("ascii").contains(PARENT_TRACE),
        "same trace as the client"
    );
    rec.chunk_gap(Duration::from_millis(3));
    rec.finish(measurement(f));
    t.shutdown();
    t.shutdown();
}

#[test]
fn init_logging_twice_is_harmless() {
    let _first = init_logging(LogFormat::Json);
    assert!(
        init_logging(LogFormat::Text).is_none(),
        "a second call installs nothing"
    );
}

/// Accept one connection on `listener` and return the first bytes sent.
async fn first_bytes(listener: tokio::net::TcpListener) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let (mut sock, _) = listener.accept().await.expect("accept");
    let mut buf = vec![0u8; 256];
    let mut got = 0;
    while got < 24 {
        match sock.read(&mut buf[got..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    buf.truncate(got);
    buf
}

async fn export_reaches(protocol: OtlpProtocol) -> Vec<u8> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let mut cfg = config();
    cfg.otlp_enabled = Some(true);
    cfg.otlp_protocol = protocol;
    cfg.otlp_endpoint = Some(format!("http://{addr}"));
    cfg.otlp_headers = vec![("x-collector-token".into(), "t0k".into())];
    let t = Telemetry::init(&cfg).expect("init with OTLP");
    run(
        &t,
        facts(Some("gpt-4o"), None, true),
        &HeaderMap::new(),
        &[],
    );
    let reader = tokio::spawn(first_bytes(listener));
    let flusher = t.clone();
    // The export fails (the listener never answers); flush is bounded.
    let flush = tokio::task::spawn_blocking(move || flusher.flush());
    let bytes = tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("exporter connected within 10 s")
        .expect("reader task");
    let _ = flush.await;
    tokio::task::spawn_blocking(move || drop(t))
        .await
        .expect("drop");
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_export_runs_from_the_batch_thread() {
    let bytes = export_reaches(OtlpProtocol::Grpc).await;
    assert!(
        bytes.starts_with(b"PRI * HTTP/2.0"),
        "gRPC exporter sent an HTTP/2 preface from the batch thread, got {:?}",
        String::from_utf8_lossy(&bytes)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_export_posts_to_signal_path() {
    let bytes = export_reaches(OtlpProtocol::HttpProtobuf).await;
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.starts_with("POST /v1/traces") || text.starts_with("POST /v1/metrics"),
        "OTLP/HTTP posts to <endpoint>/v1/<signal>, got {text:?}"
    );
}

#[test]
fn drains_active_is_observed_at_each_collection() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let h = harness(config());
    let active = Arc::new(AtomicU64::new(3));
    let seen = active.clone();
    h.telemetry
        .observe_drains(move || seen.load(Ordering::Relaxed));
    let value = |rm: &ResourceMetrics| {
        let metric = rm
            .scope_metrics()
            .flat_map(|s| s.metrics())
            .find(|m| m.name() == M_DRAINS_ACTIVE)
            .expect("tokentap.drains.active exported");
        match metric.data() {
            AggregatedMetrics::U64(MetricData::Gauge(g)) => {
                g.data_points().map(|p| p.value()).sum::<u64>()
            }
            other => panic!("not a u64 gauge: {other:?}"),
        }
    };
    assert_eq!(value(&h.collect()), 3);
    active.store(0, Ordering::Relaxed);
    assert_eq!(value(&h.collect()), 0, "read again at the next collection");
}

/// Every OpenMetrics sample line that carries an exemplar, split at ` # `.
fn exemplar_lines(om: &str) -> Vec<(&str, &str)> {
    om.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(" # "))
        .collect()
}

#[test]
fn exemplars_carry_the_span_trace_id_on_their_own_buckets() {
    let h = harness_with_pull(InMemoryMetricExporter::default());
    let t = &h.telemetry;
    let f = facts(Some("gpt-4o"), None, true);
    run(t, f, &traceparent_headers(), &[3, 80]);
    let om = t
        .scrape(prometheus::Format::OpenMetrics)
        .expect("OpenMetrics scrape");
    let lines = exemplar_lines(&om);
    // The measurement: duration 0.75 s, TTFT 0.2 s, decode (11 − 1) /
    // 0.5 s = 20 tokens/s (on a bound: its own bucket), stall 80 ms; it
    // ended at start_wall + 0.75 s.
    let want = [
        ("gen_ai_client_inference_duration_seconds", "1.28", "0.75"),
        ("gen_ai_server_request_duration_seconds", "1.28", "0.75"),
        ("gen_ai_server_time_to_first_token_seconds", "0.25", "0.2"),
        ("tokentap_decode_tokens_per_second", "20.0", "20.0"),
        ("tokentap_stream_max_stall_seconds", "0.1", "0.08"),
    ];
    for (family, le, value) in want {
        let bucket = format!("{family}_bucket{{");
        let on: Vec<_> = lines
            .iter()
            .filter(|(s, _)| s.starts_with(&bucket))
            .collect();
        assert_eq!(
            on.len(),
            1,
            "one exemplar on {family}, on its own bucket:\n{om}"
        );
        let (sample, exemplar) = on[0];
        assert!(
            sample.contains(&format!("le=\"{le}\"}} 1")),
            "{family}'s exemplar sits on le={le}: {sample}"
        );
        assert_eq!(
            *exemplar,
            format!("{{trace_id=\"{PARENT_TRACE}\"}} {value} 1700000000.750"),
            "{family}"
        );
    }
    assert_eq!(
        lines.len(),
        want.len(),
        "exemplars only on the histograms above:\n{om}"
    );
    let text = t.scrape(prometheus::Format::Text).expect("text scrape");
    assert!(
        !text.contains("trace_id") && exemplar_lines(&text).is_empty(),
        "the text format carries no exemplars:\n{text}"
    );
    t.shutdown();
}

#[test]
fn dropped_spans_and_push_only_telemetry_keep_no_exemplars() {
    // A span the ratio drops, and every span when nothing exports them.
    let mut cfg = config();
    cfg.sampling.ratio = 0.0;
    let dropped = harness_with_pull_cfg(cfg, InMemoryMetricExporter::default());
    let no_export = Telemetry::init_with_prometheus(&config()).expect("init with a pull reader");
    for t in [&dropped.telemetry, &no_export] {
        // The pair's first request is kept (first_of_pair); the second,
        // on the parent's trace, is ordinary.
        run(
            t,
            facts(Some("gpt-4o"), None, true),
            &HeaderMap::new(),
            &[3],
        );
        run(
            t,
            facts(Some("gpt-4o"), None, true),
            &traceparent_headers(),
            &[3],
        );
        let om = t.scrape(prometheus::Format::OpenMetrics).expect("scrape");
        let counted = om
            .lines()
            .filter(|l| l.starts_with("gen_ai_server_time_to_first_token_seconds_count{"))
            .all(|l| l.ends_with(" 2"));
        assert!(
            counted && om.contains("gen_ai_server_time_to_first_token_seconds_count{"),
            "both requests were counted:\n{om}"
        );
        assert!(
            !om.contains(PARENT_TRACE),
            "a span that is not exported has no exemplar pointing at it:\n{om}"
        );
    }
    let om = no_export
        .scrape(prometheus::Format::OpenMetrics)
        .expect("scrape");
    assert!(
        exemplar_lines(&om).is_empty(),
        "without span export no span is exported, so no exemplar at all:\n{om}"
    );
    let spans = dropped.finished_spans();
    assert_eq!(
        spans.len(),
        1,
        "ratio 0 exported only the pair's first request"
    );
    assert_eq!(
        attr(&spans[0].attributes, SAMPLING_REASON),
        Some(&Value::from("first_of_pair"))
    );
    dropped.telemetry.shutdown();
    no_export.shutdown();

    let h = harness(config());
    run(
        &h.telemetry,
        facts(Some("gpt-4o"), None, true),
        &traceparent_headers(),
        &[3],
    );
    assert!(
        h.telemetry.inner.instruments.exemplars().is_empty(),
        "without /metrics nothing is kept"
    );
    h.telemetry.shutdown();
}

// ------------------------------------------------- semantic-conventions names

/// The metric names in a collection.
fn names(rm: &ResourceMetrics) -> Vec<String> {
    rm.scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| m.name().to_owned())
        .collect()
}

fn with_semconv(semconv: crate::config::Semconv) -> Harness {
    let mut cfg = config();
    cfg.semconv = semconv;
    harness(cfg)
}

/// The current names (`latest`) besides the ones both generations share.
const LATEST: [&str; 10] = [
    M_INFERENCE_DURATION,
    M_INFERENCE_TIME_TO_FIRST_CHUNK,
    M_INFERENCE_TIME_PER_OUTPUT_CHUNK,
    M_USAGE_INPUT,
    M_USAGE_OUTPUT,
    M_USAGE_CACHE_READ,
    M_USAGE_CACHE_WRITE,
    M_USAGE_REASONING,
    M_OPERATION_INPUT_TOKENS,
    M_OPERATION_OUTPUT_TOKENS,
];
/// The v1.41.0 and tokentap token names (`legacy`).
const LEGACY: [&str; 5] = [
    M_OPERATION_DURATION,
    M_TIME_TO_FIRST_CHUNK,
    M_TIME_PER_OUTPUT_CHUNK,
    M_TOKEN_USAGE,
    M_TOKENS,
];

#[test]
fn semconv_switch_picks_which_names_are_exported() {
    use crate::config::Semconv;
    for (semconv, latest, legacy) in [
        (Semconv::Latest, true, false),
        (Semconv::Legacy, false, true),
        (Semconv::Both, true, true),
    ] {
        let h = with_semconv(semconv);
        run(
            &h.telemetry,
            facts(Some("gpt-4o"), None, true),
            &HeaderMap::new(),
            &[5, 20],
        );
        let got = names(&h.collect());
        for (set, want) in [(&LATEST[..], latest), (&LEGACY[..], legacy)] {
            for name in set {
                assert_eq!(
                    got.iter().any(|n| n == name),
                    want,
                    "{semconv:?}: {name} exported = {want}; got {got:?}"
                );
            }
        }
        let dur = |name| histogram(&h.collect(), name).1[0].2;
        if latest {
            assert_eq!(dur(M_INFERENCE_DURATION), 1, "{semconv:?}: one request");
        }
        if legacy {
            assert_eq!(dur(M_OPERATION_DURATION), 1, "{semconv:?}: one request");
            let (_, gaps) = histogram(&h.collect(), M_TIME_PER_OUTPUT_CHUNK);
            assert_eq!(gaps[0].2, 2, "{semconv:?}: both gaps under the old name");
        }
    }
}

/// Every point of a counter: (modality, value).
fn by_modality(rm: &ResourceMetrics, name: &str) -> Vec<(String, i128)> {
    let mut points: Vec<(String, i128)> = sum_points(rm, name)
        .into_iter()
        .map(|(a, v)| {
            let m = attr(&a, GEN_AI_TOKEN_MODALITY).map_or_else(String::new, |m| m.to_string());
            (m, v)
        })
        .collect();
    points.sort();
    points
}

#[test]
fn usage_counters_split_tokens_by_kind_and_modality() {
    let h = harness(config());
    // Text response: usage input 12 (4 cached), output 11 (2 reasoning).
    run(
        &h.telemetry,
        facts(Some("gpt-4o"), None, true),
        &HeaderMap::new(),
        &[],
    );
    let unknown = |n: i128| vec![(MODALITY_UNKNOWN.to_owned(), n)];
    let rm = h.collect();
    for (name, want) in [
        (M_USAGE_INPUT, unknown(12)),
        (M_USAGE_OUTPUT, unknown(11)),
        (M_USAGE_CACHE_READ, unknown(4)),
        (M_USAGE_CACHE_WRITE, unknown(0)),
        (M_USAGE_REASONING, unknown(2)),
    ] {
        assert_eq!(by_modality(&rm, name), want, "{name}");
    }
    let point = &sum_points(&rm, M_USAGE_INPUT)[0].0;
    for (key, want) in [
        (GEN_AI_OPERATION_NAME, Value::from("chat")),
        (GEN_AI_PROVIDER_NAME, "openai".into()),
        (GEN_AI_REQUEST_MODEL, "gpt-4o".into()),
        (GEN_AI_RESPONSE_MODEL, "gpt-4o-2024-08-06".into()),
        (SERVER_ADDRESS, "api.openai.com".into()),
    ] {
        assert_eq!(
            attr(point, key),
            Some(&want),
            "usage counter attribute {key}"
        );
    }
    assert_eq!(attr(point, GEN_AI_TOKEN_TYPE), None, "no gen_ai.token.type");

    // A realtime-style response that splits its usage by modality: the
    // points of each counter add up to the total.
    let h = harness(config());
    let f = facts(Some("gpt-realtime"), None, true);
    let rec = Box::new(h.telemetry.begin(&f, &HeaderMap::new()));
    let mut m = measurement(f);
    m.modalities = crate::meter::ModalityTokens {
        input_text: Some(8),
        input_audio: Some(4),
        cached_text: Some(3),
        cached_audio: Some(1),
        output_text: Some(5),
        output_audio: Some(4),
    };
    rec.finish(m);
    let rm = h.collect();
    let split = |text: i128, audio: i128, rest: Option<i128>| {
        let mut v = vec![
            (MODALITY_AUDIO.to_owned(), audio),
            (MODALITY_TEXT.to_owned(), text),
        ];
        v.extend(rest.map(|n| (MODALITY_UNKNOWN.to_owned(), n)));
        v
    };
    for (name, want) in [
        (M_USAGE_INPUT, split(8, 4, None)),
        // 11 output tokens, 9 of them split: the other 2 (the reasoning
        // ones here) under `unknown`.
        (M_USAGE_OUTPUT, split(5, 4, Some(2))),
        (M_USAGE_CACHE_READ, split(3, 1, None)),
        (M_USAGE_CACHE_WRITE, unknown(0)),
        (M_USAGE_REASONING, unknown(2)),
    ] {
        assert_eq!(by_modality(&rm, name), want, "{name}");
    }
}

#[test]
fn embeddings_and_unknown_endpoints_take_their_own_duration_names() {
    let h = harness(config());
    let mut f = facts(Some("text-embedding-3-small"), None, false);
    f.operation = Some(Operation::Embeddings);
    let rec = Box::new(h.telemetry.begin(&f, &HeaderMap::new()));
    let mut m = measurement(f);
    m.usage = Usage {
        input: Some(7),
        ..Usage::default()
    };
    m.output_tokens = None;
    m.reasoning = Reasoning::default();
    rec.finish(m);
    let rm = h.collect();
    let got = names(&rm);
    assert_eq!(
        histogram(&rm, M_EMBEDDINGS_DURATION).1[0].2,
        1,
        "embeddings duration"
    );
    let (_, input) = histogram(&rm, M_EMBEDDINGS_INPUT_TOKENS);
    assert_eq!(
        (input[0].2, input[0].3),
        (1, 7.0),
        "embeddings input tokens"
    );
    for name in [
        M_INFERENCE_DURATION,
        M_OPERATION_DURATION,
        M_USAGE_INPUT,
        M_OPERATION_INPUT_TOKENS,
    ] {
        assert!(
            !got.iter().any(|n| n == name),
            "{name} for embeddings: {got:?}"
        );
    }

    // An unrecognised endpoint keeps `gen_ai.client.operation.duration`,
    // once, under `both` too.
    for semconv in [crate::config::Semconv::Latest, crate::config::Semconv::Both] {
        let h = with_semconv(semconv);
        let mut f = facts(None, None, false);
        f.operation = None;
        run(&h.telemetry, f, &HeaderMap::new(), &[]);
        let rm = h.collect();
        assert_eq!(
            histogram(&rm, M_OPERATION_DURATION).1[0].2,
            1,
            "{semconv:?}"
        );
        assert!(
            !names(&rm).iter().any(|n| n == M_INFERENCE_DURATION),
            "{semconv:?}: not an inference"
        );
        // It reported tokens: they count, without zero-filled kinds.
        assert_eq!(
            by_modality(&rm, M_USAGE_INPUT),
            vec![(MODALITY_UNKNOWN.to_owned(), 12)]
        );
        assert!(
            by_modality(&rm, M_USAGE_CACHE_READ).len() == 1,
            "cache_read reported"
        );
        assert!(
            !names(&rm).iter().any(|n| n == M_USAGE_CACHE_WRITE),
            "{semconv:?}: no zero for a kind an unknown endpoint never reported"
        );
    }
}

// ------------------------------------------- one aggregation for both readers

/// Every data point of a collection as `name{attrs}` → its values (kind,
/// temporality, value or count/sum/buckets/min/max), and each sum's and
/// histogram's start time.
type Digest = (
    std::collections::BTreeMap<String, String>,
    std::collections::BTreeMap<String, Option<SystemTime>>,
);

fn digest(rm: &ResourceMetrics) -> Digest {
    use std::collections::BTreeMap;
    fn key(name: &str, attrs: &mut dyn Iterator<Item = &KeyValue>) -> String {
        let mut a: Vec<String> = attrs.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
        a.sort();
        format!("{name}{{{}}}", a.join(","))
    }
    fn points<T: std::fmt::Debug + Copy>(
        name: &str,
        data: &MetricData<T>,
        out: &mut BTreeMap<String, String>,
    ) -> Option<SystemTime> {
        match data {
            MetricData::Sum(s) => {
                for p in s.data_points() {
                    let v = format!("sum {:?} {:?}", s.temporality(), p.value());
                    out.insert(key(name, &mut p.attributes()), v);
                }
                Some(s.start_time())
            }
            MetricData::Gauge(g) => {
                for p in g.data_points() {
                    out.insert(
                        key(name, &mut p.attributes()),
                        format!("gauge {:?}", p.value()),
                    );
                }
                // An observable gauge's start time is the previous
                // collection's time (SDK 0.33): it moves with each one.
                None
            }
            MetricData::Histogram(h) => {
                for p in h.data_points() {
                    let v = format!(
                        "histogram {:?} {} {:?} {:?} {:?} {:?}",
                        h.temporality(),
                        p.count(),
                        p.sum(),
                        p.bucket_counts().collect::<Vec<_>>(),
                        p.min(),
                        p.max()
                    );
                    out.insert(key(name, &mut p.attributes()), v);
                }
                Some(h.start_time())
            }
            MetricData::ExponentialHistogram(_) => panic!("{name}: no exponential histograms"),
        }
    }
    let (mut values, mut starts) = (BTreeMap::new(), BTreeMap::new());
    for m in rm.scope_metrics().flat_map(|s| s.metrics()) {
        let start = match m.data() {
            AggregatedMetrics::F64(d) => points(m.name(), d, &mut values),
            AggregatedMetrics::U64(d) => points(m.name(), d, &mut values),
            AggregatedMetrics::I64(d) => points(m.name(), d, &mut values),
        };
        starts.insert(m.name().to_owned(), start);
    }
    (values, starts)
}

/// `init_with` plus the Prometheus pull reader; the exporter's temporality
/// decides how many readers there are.
fn harness_with_pull(metrics: InMemoryMetricExporter) -> Harness {
    harness_with_pull_cfg(config(), metrics)
}

fn harness_with_pull_cfg(cfg: TelemetryConfig, metrics: InMemoryMetricExporter) -> Harness {
    let spans = InMemorySpanExporter::default();
    let telemetry = Telemetry::init_exporters(
        &cfg,
        spans.clone(),
        metrics.clone(),
        Some(PullReader::new()),
    );
    Harness {
        telemetry,
        spans,
        metrics,
    }
}

/// The pull reader's collection, as `/metrics` sees it.
fn pulled(h: &Harness) -> ResourceMetrics {
    h.telemetry
        .inner
        .pull
        .as_ref()
        .expect("a pull reader")
        .collect()
        .expect("pull collection")
}

/// One streamed request, without trace context.
fn one_request(t: &Telemetry) {
    run(
        t,
        facts(Some("gpt-4o"), None, true),
        &HeaderMap::new(),
        &[3],
    );
}

fn requests_count(rm: &ResourceMetrics) -> u64 {
    histogram(rm, M_INFERENCE_DURATION)
        .1
        .iter()
        .map(|p| p.2)
        .sum()
}

#[test]
fn pushed_metrics_match_the_periodic_reader_and_the_scrape() {
    let one = harness_with_pull(InMemoryMetricExporter::default());
    let two = harness(config());
    for h in [&one, &two] {
        run(
            &h.telemetry,
            facts(Some("gpt-4o"), Some("t1"), true),
            &traceparent_headers(),
            &[3, 80],
        );
        run(
            &h.telemetry,
            facts(Some("gpt-4o-mini"), None, false),
            &HeaderMap::new(),
            &[],
        );
        h.telemetry.record_config_reload(true);
    }
    let (pushed, pushed_starts) = digest(&one.collect());
    let (before, _) = digest(&two.collect());
    assert!(
        pushed.len() > 20,
        "a full collection was pushed: {pushed:?}"
    );
    assert_eq!(
        pushed, before,
        "pushed from the shared reader = the SDK's own periodic reader"
    );
    let (scraped, scraped_starts) = digest(&pulled(&one));
    assert_eq!(scraped, pushed, "the scrape sees what was pushed");
    assert_eq!(
        scraped_starts, pushed_starts,
        "one aggregation: the same start times"
    );
    assert!(
        pushed.values().all(|v| !v.contains("Delta")),
        "cumulative throughout: {pushed:?}"
    );
    one.telemetry.shutdown();
    two.telemetry.shutdown();
}

#[test]
fn scrapes_between_exports_do_not_disturb_the_pushed_totals() {
    let h = harness_with_pull(InMemoryMetricExporter::default());
    one_request(&h.telemetry);
    let first = h.collect();
    assert_eq!(requests_count(&first), 1);
    for _ in 0..3 {
        h.telemetry
            .scrape(prometheus::Format::OpenMetrics)
            .expect("scrape");
    }
    one_request(&h.telemetry);
    let second = h.collect();
    assert_eq!(
        requests_count(&second),
        2,
        "still the running total after scrapes"
    );
    assert_eq!(
        digest(&first).1,
        digest(&second).1,
        "start times do not move between exports"
    );
    let text = h
        .telemetry
        .scrape(prometheus::Format::Text)
        .expect("scrape");
    assert!(
        text.lines().any(
            |l| l.starts_with("gen_ai_client_inference_duration_seconds_count{")
                && l.ends_with(" 2")
        ),
        "the scrape is cumulative too:\n{text}"
    );
    h.telemetry.shutdown();
}

#[test]
fn shutdown_pushes_the_final_values_once() {
    let h = harness_with_pull(InMemoryMetricExporter::default());
    one_request(&h.telemetry);
    h.telemetry.shutdown();
    let all = h.metrics.get_finished_metrics().expect("in-memory metrics");
    assert_eq!(
        all.len(),
        1,
        "one export, at shutdown (the interval is an hour)"
    );
    assert_eq!(requests_count(&all[0]), 1);
    h.telemetry.shutdown();
    h.telemetry.flush();
    let all = h.metrics.get_finished_metrics().expect("in-memory metrics");
    assert_eq!(all.len(), 1, "nothing after shutdown");
    assert!(
        h.telemetry.scrape(prometheus::Format::Text).is_err(),
        "the reader is shut"
    );
}

#[test]
fn pushes_run_on_the_export_interval() {
    let metrics = InMemoryMetricExporter::default();
    let mut cfg = config();
    cfg.metrics_export_interval = Duration::from_millis(50);
    let spans = InMemorySpanExporter::default();
    let t = Telemetry::init_exporters(&cfg, spans, metrics.clone(), Some(PullReader::new()));
    one_request(&t);
    let deadline = Instant::now() + Duration::from_secs(10);
    let exported = || {
        metrics
            .get_finished_metrics()
            .expect("in-memory metrics")
            .len()
    };
    while exported() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(exported() >= 2, "timed exports without flush");
    let last = metrics.get_finished_metrics().expect("in-memory metrics");
    assert_eq!(requests_count(last.last().expect("one")), 1);
    t.shutdown();
}

#[test]
fn failed_pushes_are_counted_with_a_pull_reader_too() {
    let t = Telemetry::init_exporters(
        &config(),
        FailingSpans,
        FailingMetrics,
        Some(PullReader::new()),
    );
    one_request(&t);
    t.flush();
    let d = t.dropped();
    assert!(
        d.data_points > 10,
        "every data point of the failed export counted, got {}",
        d.data_points
    );
    let text = t
        .scrape(prometheus::Format::Text)
        .expect("scrape still works");
    assert!(text.contains("tokentap_telemetry_dropped"), "{text}");
    t.shutdown();
}

#[test]
fn delta_export_keeps_its_own_reader_and_exact_deltas() {
    let metrics = opentelemetry_sdk::metrics::InMemoryMetricExporterBuilder::new()
        .with_temporality(Temporality::Delta)
        .build();
    let h = harness_with_pull(metrics);
    one_request(&h.telemetry);
    assert_eq!(requests_count(&h.collect()), 1);
    h.telemetry
        .scrape(prometheus::Format::Text)
        .expect("scrape");
    one_request(&h.telemetry);
    one_request(&h.telemetry);
    let second = h.collect();
    assert_eq!(
        requests_count(&second),
        2,
        "the delta since the last export"
    );
    assert!(
        digest(&second).0.values().any(|v| v.contains("Delta")),
        "delta points"
    );
    assert_eq!(
        requests_count(&pulled(&h)),
        3,
        "the pull reader keeps its own cumulative aggregation"
    );
    h.telemetry.shutdown();
}

#[test]
fn a_ws_session_dropped_before_its_end_still_exports_its_span_once() {
    let h = harness(config());
    let f = facts(Some("gpt-4o-realtime"), None, true);
    let session = h.telemetry.begin_ws_session(&f, &HeaderMap::new());
    let clone = session.clone();
    drop(session);
    assert!(
        h.finished_spans().is_empty(),
        "a clone still holds the session: its span is open"
    );
    drop(clone);
    let spans = h.finished_spans();
    assert_eq!(spans.len(), 1, "the last clone ends the span");
    let span = &spans[0];
    assert_eq!(span.name, "websocket gpt-4o-realtime");
    assert_eq!(span.status, Status::Unset, "no outcome is claimed");
    assert!(span.end_time >= span.start_time);
    assert!(
        !span
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == WS_SESSION_END),
        "a dropped session has no end reason"
    );

    // A session that ended is not exported again when dropped.
    let session = h.telemetry.begin_ws_session(&f, &HeaderMap::new());
    session.refused(&f, "handshake_refused");
    assert_eq!(h.finished_spans().len(), 2, "refused once, nothing on drop");
}

#[test]
fn a_ws_session_span_is_kept_when_one_of_its_responses_is() {
    let mut cfg = config();
    cfg.sampling.ratio = 0.0;
    let h = harness(cfg);
    let f = facts(Some("gpt-4o-realtime"), None, true);
    let summary = crate::meter::ws_session::WsSessionSummary::default();
    let reason = |s: &SpanData| attr(&s.attributes, SAMPLING_REASON).cloned();

    // The pair's first response is kept: its session too.
    let first = h.telemetry.begin_ws_session(&f, &HeaderMap::new());
    Box::new(first.begin_child(&f)).finish(measurement(f.clone()));
    first.finish(&f, &summary);
    // An ordinary response at ratio 0 is dropped, and so is its session.
    let quiet = h.telemetry.begin_ws_session(&f, &HeaderMap::new());
    Box::new(quiet.begin_child(&f)).finish(measurement(f.clone()));
    quiet.finish(&f, &summary);
    // A failed response is kept, and its session with it.
    let failing = h.telemetry.begin_ws_session(&f, &HeaderMap::new());
    let mut failed = measurement(f.clone());
    failed.outcome = crate::meter::Outcome::UpstreamError;
    failed.error_type = Some("server_error".into());
    Box::new(failing.begin_child(&f)).finish(failed);
    failing.finish(&f, &summary);

    let spans = h.finished_spans();
    let got: Vec<(String, Option<Value>)> = spans
        .iter()
        .map(|s| (s.name.to_string(), reason(s)))
        .collect();
    let want = |name: &str, r: &str| (name.to_owned(), Some(Value::from(r.to_owned())));
    assert_eq!(
        got,
        vec![
            want("chat gpt-4o-realtime", "first_of_pair"),
            want("websocket gpt-4o-realtime", "response"),
            want("chat gpt-4o-realtime", "error"),
            want("websocket gpt-4o-realtime", "response"),
        ],
        "the quiet session and its response are not exported"
    );
    h.telemetry.shutdown();
}
