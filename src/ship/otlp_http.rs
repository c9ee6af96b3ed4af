//! OTLP span export over both protocols: batches of finished span records
//! in; per batch, one request carrying the same directly encoded protobuf
//! out: `POST …/v1/traces` (OTLP/HTTP, `application/x-protobuf`) or a
//! unary `TraceService/Export` call (OTLP/gRPC: the bytes behind gRPC's
//! 5-byte length prefix, over HTTP/2, the status in `grpc-status`).
//!
//! This replaces the stock `opentelemetry-otlp` span exporters in how the
//! body is built (`otlp_wire`, without the per-span proto structs) and
//! sent (tokentap's `CollectorClient`, for metrics too); the rest follows
//! the stock exporters of 0.33: the configured headers plus
//! `OTEL_EXPORTER_OTLP_TRACES_HEADERS` / `OTEL_EXPORTER_OTLP_HEADERS`, the
//! exporter timeout as the deadline of all attempts, and the retry policy
//! (3 retries from 100 ms doubling to 1.6 s, up to 100 ms jitter). Over
//! HTTP 429/502/503/504 and network errors are retried, a 429 or 503
//! `Retry-After` honoured up to 30 s; over gRPC `UNAVAILABLE`,
//! `CANCELLED`, `DEADLINE_EXCEEDED`, `ABORTED`, `OUT_OF_RANGE`,
//! `DATA_LOSS` and network errors are retried, and a `RetryInfo` delay
//! (with `UNAVAILABLE` or `RESOURCE_EXHAUSTED`) honoured up to 30 s;
//! anything else fails at once.

use std::time::{Duration, Instant, SystemTime};

use bytes::{BufMut, Bytes, BytesMut};
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER, TE};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use tonic::Code;

use super::export_tls::{self, Answer, CollectorClient, Signal};
use super::otlp_wire::TraceEncoder;
use crate::config::{Http2Mode, OtlpProtocol, TelemetryConfig};
use crate::telemetry::TelemetryError;
use crate::telemetry::span_export::RecordExporter;
use crate::telemetry::span_record::SpanRecord;

/// The stock exporter's limit on one request body.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Retry policy of `opentelemetry-otlp` 0.33 (`RetryPolicy::recommended`).
const MAX_RETRIES: u32 = 3;
const INITIAL_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_millis(1600);
const MAX_JITTER_MS: u64 = 100;
/// Longest server-requested delay honoured (`Retry-After`, `RetryInfo`).
const MAX_THROTTLE: Duration = Duration::from_secs(30);
/// `Retry-After` values are capped here before the throttle cap applies.
const MAX_RETRY_AFTER_SECS: u64 = 600;

/// The gRPC method spans are exported by (the endpoint's path is ignored,
/// as tonic ignores it).
const GRPC_PATH: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// How one batch travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    /// OTLP/HTTP: the protobuf bytes as the POST body.
    Http,
    /// OTLP/gRPC: the bytes as one length-prefixed gRPC message.
    Grpc,
}

/// Span exporter for OTLP/HTTP (protobuf bodies) and OTLP/gRPC.
pub(super) struct OtlpSpanExporter {
    encoder: TraceEncoder,
    client: CollectorClient,
    wire: Wire,
    endpoint: http::Uri,
    headers: HeaderMap,
    timeout: Duration,
    shut_down: bool,
}

impl std::fmt::Debug for OtlpSpanExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Headers usually carry credentials: never print them.
        f.debug_struct("OtlpSpanExporter")
            .field("wire", &self.wire)
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// One failed attempt: the HTTP status (0 = no answer), the gRPC status
/// code when the call got one, a server-requested delay, and what to log.
#[derive(Debug)]
struct Failure {
    status: u16,
    grpc: Option<Code>,
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

impl OtlpSpanExporter {
    /// The exporter for `cfg`: protocol, endpoint, headers, timeout and TLS
    /// as the stock builders would resolve them; its spans belong to
    /// `resource` and `scope` and keep at most `max_attributes` attributes
    /// each.
    pub(super) fn new(
        cfg: &TelemetryConfig,
        resource: &Resource,
        scope: &InstrumentationScope,
        max_attributes: usize,
    ) -> Result<OtlpSpanExporter, TelemetryError> {
        warn_about_compression();
        let (wire, endpoint_text) = match cfg.otlp_protocol {
            OtlpProtocol::HttpProtobuf => {
                (Wire::Http, export_tls::http_endpoint(cfg, Signal::Traces))
            }
            OtlpProtocol::Grpc => (Wire::Grpc, export_tls::grpc_endpoint(cfg, Signal::Traces)),
        };
        let invalid = |e: &dyn std::fmt::Display| {
            TelemetryError(format!(
                "span exporter: invalid endpoint '{endpoint_text}': {e}"
            ))
        };
        let mut endpoint: http::Uri = endpoint_text.parse().map_err(|e| invalid(&e))?;
        if wire == Wire::Grpc {
            let mut parts = endpoint.into_parts();
            parts.path_and_query = Some(http::uri::PathAndQuery::from_static(GRPC_PATH));
            endpoint = http::Uri::from_parts(parts).map_err(|e| invalid(&e))?;
        }
        let client = CollectorClient::new(cfg, Signal::Traces)?;
        let mut encoder = TraceEncoder::new(scope, max_attributes);
        encoder.set_resource(resource);
        Ok(OtlpSpanExporter {
            encoder,
            client,
            wire,
            endpoint,
            headers: headers(cfg),
            timeout: cfg.otlp_timeout,
            shut_down: false,
        })
    }

    /// One request carrying `body`: the answer's message (the protobuf
    /// bytes of `ExportTraceServiceResponse`), or why it failed.
    async fn send_once(&self, body: &Bytes) -> Result<Bytes, Failure> {
        let mut request = http::Request::new(body.clone());
        *request.method_mut() = http::Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let h = request.headers_mut();
        let (content_type, mode) = match self.wire {
            Wire::Http => ("application/x-protobuf", Http2Mode::default()),
            Wire::Grpc => {
                h.insert(TE, HeaderValue::from_static("trailers"));
                ("application/grpc", Http2Mode::Always)
            }
        };
        h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        let answer = self
            .client
            .exchange(request, mode)
            .await
            .map_err(|e| Failure {
                status: 0,
                grpc: None,
                retry_after: None,
                message: match self.wire {
                    Wire::Http => format!("HTTP export failed: network error ({e})"),
                    Wire::Grpc => format!("gRPC export failed: network error ({e})"),
                },
            })?;
        match self.wire {
            Wire::Http => http_outcome(answer),
            Wire::Grpc => grpc_outcome(answer),
        }
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

    /// The request body for the encoded `message`: itself over HTTP, one
    /// uncompressed length-prefixed message over gRPC.
    fn frame(&self, message: Bytes) -> Bytes {
        match self.wire {
            Wire::Http => message,
            Wire::Grpc => grpc_frame(&message),
        }
    }
}

/// `message` behind gRPC's prefix: a zero compression flag and its length
/// (big-endian u32; callers keep it under `MAX_BODY`).
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

/// An OTLP/HTTP answer: its body when the status is a success.
fn http_outcome(answer: Answer) -> Result<Bytes, Failure> {
    let status = answer.head.status;
    if !status.is_success() {
        let retry_after = (answer.head.headers.get(RETRY_AFTER))
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let status = status.as_u16();
        return Err(Failure {
            status,
            grpc: None,
            retry_after,
            message: format!("HTTP export failed with status code: {status}"),
        });
    }
    Ok(answer.body)
}

/// An OTLP/gRPC answer: the response message when the call's status is
/// `OK`. The status comes from the trailers, or the head of a
/// trailers-only answer, else from the HTTP status, as tonic reads it.
/// The error names the code only: a collector's `grpc-message` may echo
/// credentials back.
fn grpc_outcome(answer: Answer) -> Result<Bytes, Failure> {
    let http = answer.head.status;
    let status = tonic::Status::from_header_map(&answer.head.headers).or_else(|| {
        answer
            .trailers
            .as_ref()
            .and_then(tonic::Status::from_header_map)
    });
    let (code, retry_after) = match status {
        Some(s) if s.code() == Code::Ok => return Ok(grpc_message(&answer.body)),
        Some(s) => (s.code(), retry_delay(s.details())),
        None if http == http::StatusCode::OK => return Ok(grpc_message(&answer.body)),
        None => (code_of_http_status(http), None),
    };
    Err(Failure {
        status: http.as_u16(),
        grpc: Some(code),
        retry_after,
        message: format!("gRPC export failed with gRPC code: {code:?}"),
    })
}

/// The gRPC code an answer without `grpc-status` gets from its HTTP status
/// (gRPC's "HTTP to gRPC status code mapping", as tonic applies it).
fn code_of_http_status(status: http::StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502 | 503 | 504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// The first message of a gRPC answer body (empty when there is none or it
/// is compressed, which tokentap never asks for).
fn grpc_message(body: &Bytes) -> Bytes {
    let Some((&[0], rest)) = body.split_first_chunk::<1>() else {
        return Bytes::new();
    };
    let Some((len, _)) = rest.split_first_chunk::<4>() else {
        return Bytes::new();
    };
    let len = u32::from_be_bytes(*len) as usize;
    body.get(5..5 + len)
        .map_or_else(Bytes::new, |m| body.slice_ref(m))
}

/// The `RetryInfo` delay among a status's details (`grpc-status-details-bin`,
/// a `google.rpc.Status`), as the stock exporter reads it.
fn retry_delay(details: &[u8]) -> Option<Duration> {
    use prost::Message;
    #[derive(Clone, PartialEq, prost::Message)]
    struct Status {
        #[prost(message, repeated, tag = "3")]
        details: Vec<Any>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct Any {
        #[prost(string, tag = "1")]
        type_url: String,
        #[prost(bytes = "vec", tag = "2")]
        value: Vec<u8>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct RetryInfo {
        #[prost(message, optional, tag = "1")]
        retry_delay: Option<ProtoDuration>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct ProtoDuration {
        #[prost(int64, tag = "1")]
        seconds: i64,
        #[prost(int32, tag = "2")]
        nanos: i32,
    }
    if details.is_empty() {
        return None;
    }
    let status = Status::decode(details).ok()?;
    let info = status
        .details
        .iter()
        .find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let d = RetryInfo::decode(info.value.as_slice()).ok()?.retry_delay?;
    let secs = u64::try_from(d.seconds).ok()?;
    let nanos = u32::try_from(d.nanos).ok()?;
    Some(Duration::new(secs, nanos.min(999_999_999)))
}

impl OtlpSpanExporter {
    /// Encode and send one batch.
    async fn export_batch(&mut self, records: Vec<SpanRecord>) -> OTelSdkResult {
        if self.shut_down {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let message = self.encoder.encode(&records);
        drop(records);
        if message.len() > MAX_BODY {
            return Err(OTelSdkError::InternalFailure(format!(
                "OTLP request body is {} bytes, over the {MAX_BODY}-byte limit; the batch is dropped",
                message.len()
            )));
        }
        let answer = self
            .send(self.frame(message))
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

impl RecordExporter for OtlpSpanExporter {
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

/// The stock classification of OTLP failures: by gRPC code when the call
/// got one, else by HTTP status.
fn classify(f: &Failure) -> Next {
    if let Some(code) = f.grpc {
        return classify_grpc(code, f.retry_after);
    }
    match f.status {
        429 | 503 => match f.retry_after {
            Some(d) => Next::Throttled(d),
            None => Next::Retry,
        },
        0 | 502 | 504 => Next::Retry,
        _ => Next::GiveUp,
    }
}

/// The stock classification of a gRPC status (`classify_tonic_status`).
fn classify_grpc(code: Code, retry_delay: Option<Duration>) -> Next {
    let cap = Duration::from_secs(MAX_RETRY_AFTER_SECS);
    match code {
        Code::ResourceExhausted => match retry_delay {
            Some(d) => Next::Throttled(d.min(cap)),
            None => Next::GiveUp,
        },
        Code::Unavailable => match retry_delay.filter(|d| !d.is_zero()) {
            Some(d) => Next::Throttled(d.min(cap)),
            None => Next::Retry,
        },
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::DataLoss => Next::Retry,
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
mod tests;
