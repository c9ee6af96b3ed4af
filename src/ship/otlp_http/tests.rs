use super::*;

fn failure(status: u16, retry_after: Option<Duration>) -> Failure {
    Failure {
        status,
        grpc: None,
        retry_after,
        message: String::new(),
    }
}

#[test]
fn failures_are_classified_as_the_stock_exporter_does() {
    assert_eq!(classify(&failure(0, None)), Next::Retry, "network error");
    assert_eq!(classify(&failure(502, None)), Next::Retry);
    assert_eq!(classify(&failure(504, None)), Next::Retry);
    assert_eq!(classify(&failure(503, None)), Next::Retry);
    let d = Duration::from_secs(2);
    assert_eq!(classify(&failure(429, Some(d))), Next::Throttled(d));
    assert_eq!(classify(&failure(400, None)), Next::GiveUp);
    assert_eq!(classify(&failure(500, None)), Next::GiveUp);
    assert_eq!(classify(&failure(401, Some(d))), Next::GiveUp);
}

#[test]
fn grpc_failures_are_classified_as_the_stock_exporter_does() {
    let d = Duration::from_secs(2);
    assert_eq!(classify_grpc(Code::Unavailable, None), Next::Retry);
    assert_eq!(
        classify_grpc(Code::Unavailable, Some(Duration::ZERO)),
        Next::Retry,
        "a zero RetryInfo delay is a plain retry"
    );
    assert_eq!(
        classify_grpc(Code::Unavailable, Some(d)),
        Next::Throttled(d)
    );
    assert_eq!(classify_grpc(Code::ResourceExhausted, None), Next::GiveUp);
    assert_eq!(
        classify_grpc(Code::ResourceExhausted, Some(d)),
        Next::Throttled(d)
    );
    for code in [
        Code::Cancelled,
        Code::DeadlineExceeded,
        Code::Aborted,
        Code::OutOfRange,
        Code::DataLoss,
    ] {
        assert_eq!(classify_grpc(code, None), Next::Retry, "{code:?}");
    }
    for code in [Code::Internal, Code::Unauthenticated, Code::Unknown] {
        assert_eq!(classify_grpc(code, Some(d)), Next::GiveUp, "{code:?}");
    }
    let f = Failure {
        status: 200,
        grpc: Some(Code::Internal),
        retry_after: None,
        message: String::new(),
    };
    assert_eq!(
        classify(&f),
        Next::GiveUp,
        "the gRPC code decides, not HTTP 200"
    );
}

fn answer(status: u16, headers: &[(&str, &str)], trailers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut b = http::Response::builder().status(status);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let head = b.body(()).expect("head").into_parts().0;
    let trailers = (!trailers.is_empty()).then(|| {
        let mut t = HeaderMap::new();
        for (k, v) in trailers {
            t.insert(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        t
    });
    Answer {
        head,
        body: Bytes::copy_from_slice(body),
        trailers,
    }
}

#[test]
fn grpc_answers_are_read_from_trailers_head_or_http_status() {
    let framed = grpc_frame(b"abc");
    assert_eq!(
        &framed[..],
        b"\0\0\0\0\x03abc",
        "flag, big-endian length, bytes"
    );
    let ok = grpc_outcome(answer(200, &[], &[("grpc-status", "0")], &framed));
    assert_eq!(
        ok.expect("OK status").as_ref(),
        b"abc",
        "the message, unframed"
    );
    let only = grpc_outcome(answer(
        200,
        &[("grpc-status", "14"), ("grpc-message", "se%20cret")],
        &[],
        b"",
    ))
    .expect_err("trailers-only UNAVAILABLE");
    assert_eq!(
        (only.grpc, classify(&only)),
        (Some(Code::Unavailable), Next::Retry)
    );
    assert!(
        !only.message.contains("cret"),
        "the collector's message is never repeated: {}",
        only.message
    );
    let trailed = grpc_outcome(answer(200, &[], &[("grpc-status", "3")], &framed))
        .expect_err("INVALID_ARGUMENT in the trailers");
    assert_eq!(classify(&trailed), Next::GiveUp);
    let proxy = grpc_outcome(answer(503, &[], &[], b"")).expect_err("HTTP 503");
    assert_eq!(proxy.grpc, Some(Code::Unavailable), "mapped from HTTP");
    let bare = grpc_outcome(answer(200, &[], &[], b""));
    assert_eq!(bare.expect("no status at all is success").len(), 0);
}

#[test]
fn retry_info_is_read_from_status_details() {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct D {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Info {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<D>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct A {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct S {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(message, repeated, tag = "3")]
        details: Vec<A>,
    }
    let info = Info {
        retry_delay: Some(D {
            seconds: 3,
            nanos: 500_000_000,
        }),
    };
    let status = S {
        code: 14,
        details: vec![A {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
            value: info.encode_to_vec(),
        }],
    };
    assert_eq!(
        retry_delay(&status.encode_to_vec()),
        Some(Duration::from_millis(3500))
    );
    assert_eq!(retry_delay(&[]), None);
    assert_eq!(retry_delay(&[0xff]), None, "garbage is ignored");
}

#[test]
fn retry_after_is_seconds_or_a_date_capped_at_ten_minutes() {
    assert_eq!(parse_retry_after(" 7 "), Some(Duration::from_secs(7)));
    assert_eq!(parse_retry_after("100000"), Some(Duration::from_secs(600)));
    assert_eq!(
        parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT"),
        Some(Duration::ZERO),
        "a date in the past means now"
    );
    assert_eq!(parse_retry_after("soon"), None);
}

#[test]
fn partial_success_is_read_from_the_answer() {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTracePartialSuccess, ExportTraceServiceResponse,
    };
    use prost::Message;
    let answer = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 3,
            error_message: "too old".into(),
        }),
    }
    .encode_to_vec();
    assert_eq!(partial_success(&answer), Some((3, "too old".into())));
    assert_eq!(partial_success(&[]), None, "an empty answer is success");
    assert_eq!(partial_success(&[0xff, 0xff]), None, "garbage is ignored");
}

/// One HTTP/1.1 request as the collector saw it.
#[derive(Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// A collector on 127.0.0.1 answering its requests with `statuses`, in
/// order, then stopping; returns its endpoint and what it saw.
fn collector(statuses: Vec<u16>) -> (String, std::thread::JoinHandle<Vec<Seen>>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("address"));
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut statuses = statuses.into_iter();
        'conns: while let Ok((conn, _)) = listener.accept() {
            let mut r = BufReader::new(conn.try_clone().expect("clone"));
            let mut w = conn;
            loop {
                let mut head = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        continue 'conns;
                    }
                    head.push_str(&line);
                    if line == "\r\n" {
                        break;
                    }
                }
                let len = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().parse::<usize>().expect("length"))
                    })
                    .unwrap_or(0);
                let mut body = vec![0; len];
                r.read_exact(&mut body).expect("body");
                seen.push(Seen { head, body });
                let Some(status) = statuses.next() else {
                    return seen;
                };
                write!(w, "HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n").expect("answer");
                if statuses.len() == 0 {
                    return seen;
                }
            }
        }
        seen
    });
    (endpoint, server)
}

/// Where the exporters' HTTP requests run, as tokentap's control
/// runtime does in the proxy.
static RUNTIME: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
});

fn exporter(endpoint: &str) -> OtlpSpanExporter {
    let mut cfg = crate::telemetry::tests::config();
    cfg.otlp_endpoint = Some(endpoint.to_owned());
    cfg.otlp_headers = vec![("x-collector-token".into(), "t0k".into())];
    cfg.otlp_timeout = Duration::from_secs(10);
    let _in = RUNTIME.enter();
    let resource = Resource::builder_empty()
        .with_service_name("tokentap-test")
        .build();
    let scope = InstrumentationScope::builder("tokentap").build();
    OtlpSpanExporter::new(&cfg, &resource, &scope, 128).expect("exporter")
}

fn span(name: &str) -> SpanRecord {
    use crate::telemetry::span_record::{SpanParts, SpanStart};
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    SpanRecord::WsSession(Box::new(SpanParts {
        start: SpanStart {
            context: SpanContext::new(
                TraceId::from(9_u128),
                SpanId::from(4_u64),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent: SpanId::INVALID,
            parent_remote: false,
            head: Default::default(),
        },
        name: name.to_owned(),
        start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(1),
        end_time: SystemTime::UNIX_EPOCH + Duration::from_secs(2),
        attributes: vec![opentelemetry::KeyValue::new("tokentap.route", "r")],
        error: None,
        kept: crate::telemetry::sampling::Kept::always(crate::telemetry::sampling::Reason::All),
    }))
}

#[test]
fn a_batch_is_posted_as_protobuf_and_retried_after_a_503() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let (endpoint, server) = collector(vec![503, 200]);
    let mut e = exporter(&endpoint);
    let result = e.export(vec![span("chat m")]);
    assert!(
        result.is_ok(),
        "export must succeed on the retry: {result:?}"
    );
    let seen = server.join().expect("collector thread");
    assert_eq!(seen.len(), 2, "one retry after the 503: {seen:?}");
    for s in &seen {
        let head = s.head.to_ascii_lowercase();
        assert!(head.starts_with("post /v1/traces http/1.1"), "{head}");
        assert!(
            head.contains("content-type: application/x-protobuf"),
            "{head}"
        );
        assert!(
            head.contains("x-collector-token: t0k"),
            "configured header: {head}"
        );
    }
    assert_eq!(seen[0].body, seen[1].body, "the retry sends the same bytes");
    let req = ExportTraceServiceRequest::decode(seen[1].body.as_slice()).expect("decodes");
    let rs = &req.resource_spans[0];
    let service = rs
        .resource
        .as_ref()
        .expect("resource")
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name");
    assert!(
        service.is_some(),
        "the resource set by the provider is sent: {rs:?}"
    );
    assert_eq!(rs.scope_spans[0].spans[0].name, "chat m");
}

#[test]
fn a_400_fails_without_a_retry_and_later_exports_still_go_out() {
    let (endpoint, server) = collector(vec![400, 200]);
    let mut e = exporter(&endpoint);
    let first = e.export(vec![span("a")]);
    assert!(
        matches!(&first, Err(OTelSdkError::InternalFailure(m)) if m.contains("400")),
        "a 400 is final and named: {first:?}"
    );
    assert!(e.export(vec![span("b")]).is_ok(), "the next batch is sent");
    assert_eq!(
        server.join().expect("collector thread").len(),
        2,
        "one attempt per batch"
    );
    assert!(e.shutdown().is_ok());
    assert!(
        matches!(
            e.export(vec![span("c")]),
            Err(OTelSdkError::AlreadyShutdown)
        ),
        "nothing is sent after shutdown"
    );
}

#[test]
fn percent_escapes_decode_and_bad_ones_are_refused() {
    assert_eq!(percent_decode("se%20cret").as_deref(), Some("se cret"));
    assert_eq!(percent_decode("caf%C3%A9").as_deref(), Some("café"));
    assert_eq!(percent_decode("bad%2"), None);
    assert_eq!(percent_decode("bad%zz"), None);
}
