//! Self-tests of the test harness (no proxy involved): the scripted upstream
//! keeps its timing, records requests, reports cancellation; the OTLP
//! receiver decodes both protocols. If these fail, other failures mean nothing.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1 as pm;
use opentelemetry_proto::tonic::trace::v1 as pt;
use prost::Message;
use support::client::{self, Req};
use support::otlp::{Collector, Protocol};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Upstream};

#[tokio::test]
async fn scripted_stream_keeps_its_timing_and_records_the_request() {
    let spec = StreamSpec::tokens(5, Duration::from_millis(200), Duration::from_millis(30));
    let reply = script::openai_chat_sse(&spec);
    let want = reply.body_bytes();
    let up = Upstream::fixed(reply).await;
    let c = client::http1();
    let req = Req::post_json(
        up.addr,
        "/v1/chat/completions?x=1",
        script::openai_request("m", true, None),
    )
    .header("x-probe", "yes");
    let got = client::fetch(&c, &req).await;
    support::assert_bytes_eq("direct body", &got.body, &want);
    let first = got.first_containing("tok0").expect("tok0 arrives");
    assert!(
        first >= Duration::from_millis(190) && first < Duration::from_millis(600),
        "first token should arrive ~200 ms after the request, arrived after {first:?}"
    );
    let e = up.only().await;
    assert_eq!(
        e.path_and_query, "/v1/chat/completions?x=1",
        "path and query recorded as sent"
    );
    assert_eq!(
        e.header("x-probe").as_deref(),
        Some("yes"),
        "headers recorded"
    );
    assert_eq!(e.json()["model"], "m", "body recorded");
    assert_eq!(
        e.wait_end(Duration::from_secs(2)).await.map(|x| x.0),
        Some(BodyEnd::Completed)
    );
    assert_eq!(e.sent(), want, "sent bytes recorded");
}

#[tokio::test]
async fn scripted_upstream_sees_a_dropped_client_as_cancelled() {
    let spec = StreamSpec::tokens(3, Duration::ZERO, Duration::from_millis(10));
    let up = Upstream::fixed(script::openai_hang_after(&spec, 2)).await;
    let c = client::http1();
    let req = Req::post_json(
        up.addr,
        "/v1/chat/completions",
        script::openai_request("m", true, None),
    );
    let (resp, _) = client::send(&c, &req).await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "tok1").await;
    drop(body);
    let e = up.only().await;
    let end = e.wait_end(Duration::from_secs(3)).await;
    assert_eq!(
        end.map(|x| x.0),
        Some(BodyEnd::Cancelled),
        "a dropped client must show as Cancelled"
    );
}

#[tokio::test]
async fn scripted_abort_breaks_the_body_off() {
    let spec = StreamSpec::tokens(4, Duration::ZERO, Duration::ZERO);
    let up = Upstream::fixed(script::openai_abort_after(&spec, 2)).await;
    let c = client::http1();
    let req = Req::post_json(
        up.addr,
        "/v1/chat/completions",
        script::openai_request("m", true, None),
    );
    let got = client::fetch(&c, &req).await;
    assert!(
        got.error.is_some(),
        "client should see a body error after an abort; got {:?}",
        got.text()
    );
    assert!(
        got.text().contains("tok1") && !got.text().contains("tok2"),
        "partial body: {:?}",
        got.text()
    );
}

#[tokio::test]
async fn h2c_clients_are_served() {
    let up = Upstream::fixed(script::openai_chat_json("m", "hi", (1, 1))).await;
    let c = client::h2c();
    let req = Req::post_json(
        up.addr,
        "/v1/chat/completions",
        script::openai_request("m", false, None),
    );
    let got = client::fetch(&c, &req).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        up.only().await.version,
        http::Version::HTTP_2,
        "upstream saw HTTP/2"
    );
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn trace_req() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![pt::ResourceSpans {
            resource: None,
            scope_spans: vec![pt::ScopeSpans {
                scope: None,
                spans: vec![pt::Span {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 8],
                    parent_span_id: vec![3; 8],
                    name: "chat selftest".into(),
                    attributes: vec![kv("tokentap.route", "r")],
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn metric_req() -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![pm::ResourceMetrics {
            resource: None,
            scope_metrics: vec![pm::ScopeMetrics {
                scope: None,
                metrics: vec![pm::Metric {
                    name: "selftest.hist".into(),
                    unit: "s".into(),
                    data: Some(pm::metric::Data::Histogram(pm::Histogram {
                        data_points: vec![pm::HistogramDataPoint {
                            attributes: vec![kv("a", "b")],
                            count: 2,
                            sum: Some(0.5),
                            bucket_counts: vec![1, 1],
                            explicit_bounds: vec![0.1],
                            ..Default::default()
                        }],
                        aggregation_temporality: 2,
                    })),
                    ..Default::default()
                }],
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

#[tokio::test]
async fn otlp_receiver_decodes_grpc() {
    let col = Collector::start().await;
    let ch = tonic::transport::Endpoint::from_shared(col.endpoint())
        .unwrap()
        .connect()
        .await
        .unwrap();
    TraceServiceClient::new(ch.clone())
        .export(trace_req())
        .await
        .expect("gRPC trace export");
    MetricsServiceClient::new(ch)
        .export(metric_req())
        .await
        .expect("gRPC metrics export");
    let s = col.wait_span_named("chat selftest").await;
    assert_eq!(s.protocol, Protocol::Grpc);
    assert_eq!(s.trace_id, "01".repeat(16));
    assert_eq!(s.parent_span_id, "03".repeat(8));
    assert_eq!(s.str("tokentap.route"), "r");
    let p = col
        .wait_point(Duration::from_secs(2), "selftest.hist", |_| true)
        .await;
    assert_eq!(p.unit, "s");
    assert_eq!(p.hist().bounds, vec![0.1]);
    assert_eq!(p.attr_str("a"), Some("b"));
}

#[tokio::test]
async fn otlp_receiver_decodes_http_protobuf() {
    let col = Collector::start().await;
    let c = client::http1();
    for (path, body) in [
        ("/v1/traces", trace_req().encode_to_vec()),
        ("/v1/metrics", metric_req().encode_to_vec()),
    ] {
        let req =
            Req::post_json(col.addr, path, body).header("content-type", "application/x-protobuf");
        let got = client::fetch(&c, &req).await;
        assert_eq!(got.status, 200, "POST {path}");
    }
    let s = col.wait_span_named("chat selftest").await;
    assert_eq!(s.protocol, Protocol::HttpProtobuf);
    let p = col
        .wait_point(Duration::from_secs(2), "selftest.hist", |_| true)
        .await;
    assert_eq!(p.hist().count, 2);
}
