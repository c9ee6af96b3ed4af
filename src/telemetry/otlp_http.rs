//! OTLP/HTTP span export: batches of finished span records in; one
//! `POST …/v1/traces` of directly encoded protobuf per batch out.
//!
//! This replaces the stock `opentelemetry-otlp` HTTP span exporter in how
//! the body is built (`otlp_wire`, without the per-span proto structs) and
//! sent (tokentap's `CollectorClient`, for metrics too); the rest follows
//! the stock exporter of 0.33: the configured headers plus
//! `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `OTEL_EXPORTER_OTLP_HEADERS`, the exporter timeout as the deadline of all
//! attempts, and the retry policy (3 retries from 100 ms doubling to 1.6 s,
//! up to 100 ms jitter; 429/502/503/504 and network errors retried, a 429
//! or 503 `Retry-After` honoured up to 30 s; anything else fails at once).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use opentelemetry::InstrumentationScope;
use opentelemetry_http::HttpClient;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};

use super::TelemetryError;
use super::export_tls::{self, CollectorClient, Signal};
use super::otlp_wire::TraceEncoder;
use super::span_export::RecordExporter;
use super::span_record::SpanRecord;
use crate::config::TelemetryConfig;

/// The stock exporter's limit on one request body.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Retry policy of `opentelemetry-otlp` 0.33 (`RetryPolicy::recommended`).
const MAX_RETRIES: u32 = 3;
const INITIAL_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_millis(1600);
const MAX_JITTER_MS: u64 = 100;
/// Longest server-requested delay honoured (`Retry-After`).
const MAX_THROTTLE: Duration = Duration::from_secs(30);
/// `Retry-After` values are capped here before the throttle cap applies.
const MAX_RETRY_AFTER_SECS: u64 = 600;

/// Span exporter for OTLP/HTTP with protobuf bodies.
pub(super) struct HttpSpanExporter {
    encoder: TraceEncoder,
    client: Arc<dyn HttpClient>,
    endpoint: http::Uri,
    headers: HeaderMap,
    timeout: Duration,
    shut_down: bool,
}

impl std::fmt::Debug for HttpSpanExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers usually carry credentials: never print them.
        f.debug_struct("HttpSpanExporter")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// One failed attempt: the HTTP status (0 = no answer) and what to log.
#[derive(Debug)]
struct Failure {
    status: u16,
    retry_after: Option<Duration>,
    message: String,
}

/// What the retry loop does after a failure.
#[derive(Debug, PartialEq)]
enum Next {
    GiveUp,
    Retry,
    Throttled(Duration),
}

impl HttpSpanExporter {
    /// The exporter for `cfg`: endpoint, headers, timeout and TLS as the
    /// stock builder would resolve them; its spans belong to `resource` and
    /// `scope` and keep at most `max_attributes` attributes each.
    pub(super) fn new(
        cfg: &TelemetryConfig,
        resource: &Resource,
        scope: &InstrumentationScope,
        max_attributes: usize,
    ) -> Result<HttpSpanExporter, TelemetryError> {
        warn_about_compression();
        let endpoint_text = export_tls::http_endpoint(cfg, Signal::Traces);
        let endpoint: http::Uri = endpoint_text.parse().map_err(|e| {
            TelemetryError(format!(
                "span exporter: invalid endpoint '{endpoint_text}': {e}"
            ))
        })?;
        let client = Arc::new(CollectorClient::new(cfg, Signal::Traces)?);
        let mut encoder = TraceEncoder::new(scope, max_attributes);
        encoder.set_resource(resource);
        Ok(HttpSpanExporter {
            encoder,
            client,
            endpoint,
            headers: headers(cfg),
            timeout: cfg.otlp_timeout,
            shut_down: false,
        })
    }

    /// One POST of `body`: the response body, or why it failed.
    async fn send_once(&self, body: &Bytes) -> Result<Bytes, Failure> {
        let mut request = http::Request::new(body.clone());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let h = request.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        let response = self.client.send_bytes(request).await.map_err(|e| Failure {
            status: 0,
            retry_after: None,
            message: format!("HTTP export failed: network error ({e})"),
        })?;
        let status = response.status().as_u16();
        if !response.status().is_success() {
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            return Err(Failure {
                status,
                retry_after,
                message: format!("HTTP export failed with status code: {status}"),
            });
        }
        Ok(response.into_body())
    }

    /// Send `body`, retrying as the stock exporter does within `timeout`.
    async fn send(&self, body: Bytes) -> Result<Bytes, Failure> {
        #[allow(
            clippy::disallowed_methods,
            reason = "the export deadline; not a measurement"
        )]
        let start = Instant::now();
        let (mut attempt, mut delay, mut cap) = (0, INITIAL_DELAY, MAX_DELAY);
        loop {
            let err = match self.send_once(&body).await {
                Ok(r) => return Ok(r),
                Err(e) => e,
            };
            if start.elapsed() >= self.timeout || attempt >= MAX_RETRIES {
                return Err(err);
            }
            match classify(&err) {
                Next::GiveUp => return Err(err),
                Next::Retry => {}
                Next::Throttled(asked) => {
                    let asked = asked.min(MAX_THROTTLE);
                    if asked > cap {
                        cap = MAX_THROTTLE;
                    }
                    delay = delay.max(asked);
                }
            }
            attempt += 1;
            let jitter = Duration::from_millis(fastrand::u64(0..=MAX_JITTER_MS));
            let pause = delay.saturating_add(jitter).min(cap);
            if pause >= self.timeout.saturating_sub(start.elapsed()) {
                return Err(err);
            }
            sleep(pause).await;
            delay = delay.saturating_mul(2).min(cap);
        }
    }
}

impl HttpSpanExporter {
    /// Encode and send one batch.
    async fn export_batch(&mut self, records: Vec<SpanRecord>) -> OTelSdkResult {
        if self.shut_down {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let body = self.encoder.encode(&records);
        drop(records);
        if body.len() > MAX_BODY {
            return Err(OTelSdkError::InternalFailure(format!(
                "OTLP HTTP request body is {} bytes, over the {MAX_BODY}-byte limit; the batch is dropped",
                body.len()
            )));
        }
        let answer = self
            .send(body)
            .await
            .map_err(|f| OTelSdkError::InternalFailure(f.message))?;
        if let Some((rejected, message)) = partial_success(&answer) {
            tracing::warn!(
                rejected_spans = rejected,
                error_message = %message,
                "the OTLP collector accepted the export but rejected {rejected} spans: {message}"
            );
        }
        Ok(())
    }
}

impl RecordExporter for HttpSpanExporter {
    fn export(&mut self, records: Vec<SpanRecord>) -> OTelSdkResult {
        futures_executor::block_on(self.export_batch(records))
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        match std::mem::replace(&mut self.shut_down, true) {
            true => Err(OTelSdkError::AlreadyShutdown),
            false => Ok(()),
        }
    }
}

/// The stock classification of OTLP/HTTP failures.
fn classify(f: &Failure) -> Next {
    match f.status {
        429 | 503 => match f.retry_after {
            Some(d) => Next::Throttled(d),
            None => Next::Retry,
        },
        0 | 502 | 504 => Next::Retry,
        _ => Next::GiveUp,
    }
}

/// `Retry-After` as delay seconds or an HTTP date, capped at 10 minutes.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let secs = match v.trim().parse::<u64>() {
        Ok(s) => s,
        Err(_) => {
            let at = httpdate::parse_http_date(v.trim()).ok()?;
            #[allow(
                clippy::disallowed_methods,
                reason = "a Retry-After date against the wall clock; not a measurement"
            )]
            let now = SystemTime::now();
            at.duration_since(now).map(|d| d.as_secs()).unwrap_or(0)
        }
    };
    Some(Duration::from_secs(secs.min(MAX_RETRY_AFTER_SECS)))
}

/// `ExportTraceServiceResponse.partial_success` when it reports rejected
/// spans or a message; an undecodable answer is ignored, as the stock
/// exporter does.
fn partial_success(body: &[u8]) -> Option<(i64, String)> {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct Response {
        #[prost(message, optional, tag = "1")]
        partial_success: Option<Partial>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Partial {
        #[prost(int64, tag = "1")]
        rejected_spans: i64,
        #[prost(string, tag = "2")]
        error_message: String,
    }
    let p = Response::decode(body).ok()?.partial_success?;
    (p.rejected_spans > 0 || !p.error_message.is_empty())
        .then_some((p.rejected_spans, p.error_message))
}

/// Back off on the runtime if the export runs on one, else on this thread
/// (the SDK's batch thread).
async fn sleep(d: Duration) {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => tokio::time::sleep(d).await,
        Err(_) => std::thread::sleep(d),
    }
}

/// Compression is not built into tokentap's OTLP export: like the stock
/// exporter, a compression asked for in the environment is ignored with a
/// warning (the first variable set to something other than `none` wins).
fn warn_about_compression() {
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ] {
        let Ok(v) = std::env::var(var) else { continue };
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        if v.eq_ignore_ascii_case("none") {
            return;
        }
        tracing::warn!(
            variable = var,
            value = v,
            "{var}={v} is ignored: tokentap exports OTLP spans uncompressed"
        );
    }
}

/// The configured headers, then those of `OTEL_EXPORTER_OTLP_TRACES_HEADERS`
/// (else `OTEL_EXPORTER_OTLP_HEADERS`) over them, as the stock builder does;
/// pairs that do not make a valid header are skipped, as there.
fn headers(cfg: &TelemetryConfig) -> HeaderMap {
    let mut map = HeaderMap::new();
    let mut put = |k: &str, v: &str| {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.trim().as_bytes()),
            HeaderValue::from_str(v),
        ) {
            map.insert(k, v);
        }
    };
    for (k, v) in &cfg.otlp_headers {
        put(k, v);
    }
    let env = [
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ]
    .into_iter()
    .find_map(|var| std::env::var(var).ok());
    if let Some(list) = env {
        for pair in list.split_terminator(',').map(str::trim) {
            let Some((k, v)) = pair.split_once('=') else {
                continue;
            };
            if let Some(v) = percent_decode(v.trim()) {
                put(k, &v);
            }
        }
    }
    map
}

/// `%XX` escapes decoded; `None` when one is malformed or not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(status: u16, retry_after: Option<Duration>) -> Failure {
        Failure {
            status,
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

    fn exporter(endpoint: &str) -> HttpSpanExporter {
        let mut cfg = super::super::tests::config();
        cfg.otlp_endpoint = Some(endpoint.to_owned());
        cfg.otlp_headers = vec![("x-collector-token".into(), "t0k".into())];
        cfg.otlp_timeout = Duration::from_secs(10);
        let _in = RUNTIME.enter();
        let resource = Resource::builder_empty()
            .with_service_name("tokentap-test")
            .build();
        let scope = InstrumentationScope::builder("tokentap").build();
        HttpSpanExporter::new(&cfg, &resource, &scope, 128).expect("exporter")
    }

    fn span(name: &str) -> SpanRecord {
        use super::super::span_record::{SpanParts, SpanStart};
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        SpanRecord::Session(Box::new(SpanParts {
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
            kept: super::super::sampling::Kept::always(super::super::sampling::Reason::All),
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
}
