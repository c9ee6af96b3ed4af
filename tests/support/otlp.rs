//! A real OTLP receiver: gRPC (`TraceService`, `MetricsService`) and
//! HTTP/protobuf (`POST /v1/traces`, `/v1/metrics`) on one 127.0.0.1 port.
//! Export requests in (decoded with the official protos), flattened spans
//! and metric points out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
    metrics_service_server::{MetricsService, MetricsServiceServer},
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
    trace_service_server::{TraceService, TraceServiceServer},
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;
use tokio::net::TcpListener;
use tower::Service;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type RespBody = UnsyncBoxBody<Bytes, BoxError>;

/// Which transport delivered an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    Grpc,
    HttpProtobuf,
}

#[derive(Default)]
struct Store {
    traces: Mutex<Vec<(Protocol, ExportTraceServiceRequest)>>,
    metrics: Mutex<Vec<(Protocol, ExportMetricsServiceRequest)>>,
    /// Raw bytes of every export body, for secret scans.
    raw: Mutex<Vec<u8>>,
    /// How this receiver misbehaves (`Collector::start_faulty`).
    fault: Option<Fault>,
    /// Export requests received (any protocol, any answer), or, for a
    /// black hole, connections accepted.
    attempts: AtomicUsize,
}

/// How a receiver started with `Collector::start_faulty` misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Answer every export with this HTTP status (HTTP/protobuf); over
    /// gRPC, 503 and 429 become `UNAVAILABLE`, anything else `INTERNAL`.
    /// Nothing is stored.
    Status(u16),
    /// Hold every export this long, then accept and store it.
    Slow(Duration),
    /// Accept TCP connections and hold them open, never reading or
    /// answering.
    BlackHole,
}

/// A running OTLP receiver.
pub(crate) struct Collector {
    pub addr: SocketAddr,
    store: Arc<Store>,
    _task: super::Background,
}

#[derive(Clone)]
struct Grpc(Arc<Store>);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let req = req.into_inner();
        self.0
            .raw
            .lock()
            .unwrap()
            .extend_from_slice(&req.encode_to_vec());
        self.0.traces.lock().unwrap().push((Protocol::Grpc, req));
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for Grpc {
    async fn export(
        &self,
        req: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let req = req.into_inner();
        self.0
            .raw
            .lock()
            .unwrap()
            .extend_from_slice(&req.encode_to_vec());
        self.0.metrics.lock().unwrap().push((Protocol::Grpc, req));
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

impl Collector {
    /// Start a receiver on 127.0.0.1:0 that accepts both protocols.
    pub(crate) async fn start() -> Collector {
        Collector::serve(Store::default(), None).await
    }

    /// Start a receiver that speaks only TLS with `config` (offer ALPN
    /// `h2` for gRPC clients); `https_endpoint` is its address.
    pub(crate) async fn start_tls(config: Arc<rustls::ServerConfig>) -> Collector {
        Collector::serve(Store::default(), Some(config)).await
    }

    /// Start a receiver on 127.0.0.1:0 that misbehaves as `fault` says.
    pub(crate) async fn start_faulty(fault: Fault) -> Collector {
        let store = Store {
            fault: Some(fault),
            ..Store::default()
        };
        if fault == Fault::BlackHole {
            return Collector::black_hole(store).await;
        }
        Collector::serve(store, None).await
    }

    /// Accept connections and keep every socket open, unread.
    async fn black_hole(store: Store) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind OTLP black hole");
        let addr = listener.local_addr().expect("OTLP black hole addr");
        let store = Arc::new(store);
        let s = store.clone();
        let task = super::Background::spawn(async move {
            let mut held = Vec::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                s.attempts.fetch_add(1, Ordering::SeqCst);
                held.push(stream);
            }
        });
        Collector {
            addr,
            store,
            _task: task,
        }
    }

    /// An address nothing listens on: connections to it are refused.
    pub(crate) fn refused_endpoint() -> String {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("bind a port to free it");
        format!("http://{dead}")
    }

    /// Export requests received so far (for a black hole: connections).
    pub(crate) fn attempts(&self) -> usize {
        self.store.attempts.load(Ordering::SeqCst)
    }

    async fn serve(store: Store, tls: Option<Arc<rustls::ServerConfig>>) -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind OTLP receiver");
        let addr = listener.local_addr().expect("OTLP receiver addr");
        let store = Arc::new(store);
        let s = store.clone();
        let task = super::Background::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let s = s.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| route(s.clone(), req));
                    let auto = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    match tls {
                        None => {
                            let _ = auto.serve_connection(TokioIo::new(stream), svc).await;
                        }
                        Some(config) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(config);
                            // A refused handshake (unknown client CA) is what some tests want.
                            let Ok(stream) = acceptor.accept(stream).await else {
                                return;
                            };
                            let _ = auto.serve_connection(TokioIo::new(stream), svc).await;
                        }
                    }
                });
            }
        });
        Collector {
            addr,
            store,
            _task: task,
        }
    }

    /// `https://localhost:PORT`, for a receiver started with `start_tls`.
    pub(crate) fn https_endpoint(&self) -> String {
        format!("https://localhost:{}", self.addr.port())
    }

    /// `http://127.0.0.1:PORT` (the OTLP base endpoint for either protocol).
    pub(crate) fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, flattened.
    pub(crate) fn spans(&self) -> Vec<SpanRec> {
        let traces = self.store.traces.lock().unwrap();
        let mut out = Vec::new();
        for (proto, req) in traces.iter() {
            for rs in &req.resource_spans {
                let resource = rs
                    .resource
                    .as_ref()
                    .map(|r| attrs(&r.attributes))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for s in &ss.spans {
                        out.push(SpanRec {
                            protocol: *proto,
                            name: s.name.clone(),
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            trace_state: s.trace_state.clone(),
                            parent_span_id: hex(&s.parent_span_id),
                            kind: s.kind,
                            start_ns: s.start_time_unix_nano,
                            end_ns: s.end_time_unix_nano,
                            attrs: attrs(&s.attributes),
                            events: s
                                .events
                                .iter()
                                .map(|e| EventRec {
                                    name: e.name.clone(),
                                    time_ns: e.time_unix_nano,
                                    attrs: attrs(&e.attributes),
                                })
                                .collect(),
                            status_code: s.status.as_ref().map(|st| st.code).unwrap_or(0),
                            status_message: s
                                .status
                                .as_ref()
                                .map(|st| st.message.clone())
                                .unwrap_or_default(),
                            resource: resource.clone(),
                        });
                    }
                }
            }
        }
        out
    }

    /// Every metric data point received so far, flattened, in arrival order.
    pub(crate) fn metric_points(&self) -> Vec<MetricPoint> {
        let metrics = self.store.metrics.lock().unwrap();
        let mut out = Vec::new();
        for (batch, (proto, req)) in metrics.iter().enumerate() {
            for rm in &req.resource_metrics {
                let resource = rm
                    .resource
                    .as_ref()
                    .map(|r| attrs(&r.attributes))
                    .unwrap_or_default();
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        let base = |attributes: &[KeyValue], value: PointValue| MetricPoint {
                            protocol: *proto,
                            batch,
                            name: m.name.clone(),
                            unit: m.unit.clone(),
                            description: m.description.clone(),
                            attrs: attrs(attributes),
                            value,
                            resource: resource.clone(),
                        };
                        match &m.data {
                            Some(metric::Data::Sum(s)) => {
                                for p in &s.data_points {
                                    out.push(base(
                                        &p.attributes,
                                        PointValue::Sum(number(&p.value)),
                                    ));
                                }
                            }
                            Some(metric::Data::Gauge(g)) => {
                                for p in &g.data_points {
                                    out.push(base(
                                        &p.attributes,
                                        PointValue::Gauge(number(&p.value)),
                                    ));
                                }
                            }
                            Some(metric::Data::Histogram(h)) => {
                                for p in &h.data_points {
                                    out.push(base(
                                        &p.attributes,
                                        PointValue::Histogram(Hist {
                                            count: p.count,
                                            sum: p.sum.unwrap_or(f64::NAN),
                                            min: p.min,
                                            max: p.max,
                                            bounds: p.explicit_bounds.clone(),
                                            buckets: p.bucket_counts.clone(),
                                        }),
                                    ));
                                }
                            }
                            _ => out.push(base(&[], PointValue::Other)),
                        }
                    }
                }
            }
        }
        out
    }

    /// Points of metric `name` from the most recent export that carried it
    /// (metrics are cumulative, so the latest export is the current total).
    pub(crate) fn latest(&self, name: &str) -> Vec<MetricPoint> {
        let all: Vec<_> = self
            .metric_points()
            .into_iter()
            .filter(|p| p.name == name)
            .collect();
        let Some(last) = all.iter().map(|p| p.batch).max() else {
            return Vec::new();
        };
        all.into_iter().filter(|p| p.batch == last).collect()
    }

    /// Names of every metric received so far.
    pub(crate) fn metric_names(&self) -> Vec<String> {
        let mut v: Vec<_> = self.metric_points().into_iter().map(|p| p.name).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Protocols that delivered anything so far.
    pub(crate) fn protocols_seen(&self) -> Vec<Protocol> {
        let mut v: Vec<Protocol> = self
            .store
            .traces
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| *p)
            .collect();
        v.extend(self.store.metrics.lock().unwrap().iter().map(|(p, _)| *p));
        v.dedup();
        v
    }

    /// Raw protobuf bytes of everything received (for secret scans).
    pub(crate) fn raw_bytes(&self) -> Vec<u8> {
        self.store.raw.lock().unwrap().clone()
    }

    /// Wait (up to `limit`) for a span matching `pred`; panics with the
    /// names of the spans seen when none arrives.
    pub(crate) async fn wait_span(
        &self,
        limit: Duration,
        what: &str,
        pred: impl Fn(&SpanRec) -> bool,
    ) -> SpanRec {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.spans().into_iter().find(|s| pred(s)) {
                return s;
            }
            if Instant::now() >= deadline {
                let names: Vec<String> = self
                    .spans()
                    .iter()
                    .map(|s| format!("{} {:?}", s.name, s.attrs))
                    .collect();
                panic!("OTLP receiver: no span {what} within {limit:?}; spans seen: {names:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait for the span named `name`.
    pub(crate) async fn wait_span_named(&self, name: &str) -> SpanRec {
        self.wait_span(super::STEP_TIMEOUT, &format!("named {name:?}"), |s| {
            s.name == name
        })
        .await
    }

    /// Wait (up to `STEP_TIMEOUT`) for a point of histogram `name` that
    /// has counted at least `count` values.
    pub(crate) async fn wait_hist(&self, name: &str, count: u64) -> MetricPoint {
        self.wait_point(super::STEP_TIMEOUT, name, |p| p.hist().count >= count)
            .await
    }

    /// Wait (up to `limit`) until the latest export of metric `name` has a
    /// point matching `pred`; panics listing the metric names seen.
    pub(crate) async fn wait_point(
        &self,
        limit: Duration,
        name: &str,
        pred: impl Fn(&MetricPoint) -> bool,
    ) -> MetricPoint {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(p) = self.latest(name).into_iter().find(|p| pred(p)) {
                return p;
            }
            if Instant::now() >= deadline {
                panic!(
                    "OTLP receiver: metric {name:?} with a matching point did not arrive within {limit:?}; \
                     latest points of it: {:#?}; metric names seen: {:?}",
                    self.latest(name),
                    self.metric_names()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn route(
    store: Arc<Store>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, Infallible> {
    let path = req.uri().path().to_owned();
    store.attempts.fetch_add(1, Ordering::SeqCst);
    match store.fault {
        Some(Fault::Slow(hold)) => tokio::time::sleep(hold).await,
        Some(Fault::Status(code)) => return Ok(fault_status(&path, code)),
        Some(Fault::BlackHole) | None => {}
    }
    let grpc = Grpc(store.clone());
    let resp = if path.starts_with("/opentelemetry.proto.collector.trace.v1.TraceService/") {
        let mut svc = TraceServiceServer::new(grpc);
        match svc.call(req).await {
            Ok(r) => r.map(|b| b.map_err(BoxError::from).boxed_unsync()),
            Err(never) => match never {},
        }
    } else if path.starts_with("/opentelemetry.proto.collector.metrics.v1.MetricsService/") {
        let mut svc = MetricsServiceServer::new(grpc);
        match svc.call(req).await {
            Ok(r) => r.map(|b| b.map_err(BoxError::from).boxed_unsync()),
            Err(never) => match never {},
        }
    } else if path == "/v1/traces" || path == "/v1/metrics" {
        http_export(&store, &path, req).await
    } else {
        plain(StatusCode::NOT_FOUND, Bytes::new())
    };
    Ok(resp)
}

async fn http_export(store: &Store, path: &str, req: Request<Incoming>) -> Response<RespBody> {
    let gzipped = req
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let Ok(body) = req.into_body().collect().await.map(|c| c.to_bytes()) else {
        return plain(StatusCode::BAD_REQUEST, Bytes::new());
    };
    let body = if gzipped {
        use std::io::Read;
        let mut out = Vec::new();
        if flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .is_err()
        {
            return plain(StatusCode::BAD_REQUEST, Bytes::new());
        }
        Bytes::from(out)
    } else {
        body
    };
    store.raw.lock().unwrap().extend_from_slice(&body);
    if path == "/v1/traces" {
        let Ok(req) = ExportTraceServiceRequest::decode(body) else {
            return plain(StatusCode::BAD_REQUEST, Bytes::new());
        };
        store
            .traces
            .lock()
            .unwrap()
            .push((Protocol::HttpProtobuf, req));
        let resp = ExportTraceServiceResponse {
            partial_success: None,
        };
        proto_ok(resp.encode_to_vec())
    } else {
        let Ok(req) = ExportMetricsServiceRequest::decode(body) else {
            return plain(StatusCode::BAD_REQUEST, Bytes::new());
        };
        store
            .metrics
            .lock()
            .unwrap()
            .push((Protocol::HttpProtobuf, req));
        let resp = ExportMetricsServiceResponse {
            partial_success: None,
        };
        proto_ok(resp.encode_to_vec())
    }
}

/// The failure answer for `code`: a gRPC trailers-only status for gRPC
/// paths, the bare HTTP status otherwise.
fn fault_status(path: &str, code: u16) -> Response<RespBody> {
    if path.starts_with("/opentelemetry.proto.collector.") {
        let grpc_code = if code == 503 || code == 429 {
            "14"
        } else {
            "13"
        };
        let mut r = plain(StatusCode::OK, Bytes::new());
        let h = r.headers_mut();
        h.insert(
            "content-type",
            http::HeaderValue::from_static("application/grpc"),
        );
        h.insert("grpc-status", http::HeaderValue::from_static(grpc_code));
        h.insert(
            "grpc-message",
            http::HeaderValue::from_static("collector%20failing%20on%20purpose"),
        );
        return r;
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    plain(status, Bytes::from_static(b"collector failing on purpose"))
}

fn plain(status: StatusCode, body: Bytes) -> Response<RespBody> {
    let mut r = Response::new(
        Full::new(body)
            .map_err(|e: Infallible| match e {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r
}

fn proto_ok(body: Vec<u8>) -> Response<RespBody> {
    let mut r = plain(StatusCode::OK, Bytes::from(body));
    r.headers_mut().insert(
        "content-type",
        http::HeaderValue::from_static("application/x-protobuf"),
    );
    r
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn number(v: &Option<number_data_point::Value>) -> f64 {
    match v {
        Some(number_data_point::Value::AsDouble(d)) => *d,
        Some(number_data_point::Value::AsInt(i)) => *i as f64,
        None => f64::NAN,
    }
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
    Array(Vec<Val>),
    Other(String),
}

impl Val {
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Numeric value (ints widen to f64).
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Int(i) => Some(*i as f64),
            Val::Double(d) => Some(*d),
            _ => None,
        }
    }

    pub(crate) fn as_i64(&self) -> Option<i64> {
        match self {
            Val::Int(i) => Some(*i),
            _ => None,
        }
    }

    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self {
            Val::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// Every string inside this value (for secret scans).
    pub(crate) fn strings(&self) -> Vec<String> {
        match self {
            Val::Str(s) | Val::Other(s) => vec![s.clone()],
            Val::Array(a) => a.iter().flat_map(Val::strings).collect(),
            Val::Bool(b) => vec![b.to_string()],
            Val::Int(i) => vec![i.to_string()],
            Val::Double(d) => vec![d.to_string()],
        }
    }
}

impl fmt::Display for Val {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Val::Str(s) => write!(f, "{s:?}"),
            Val::Bool(b) => write!(f, "{b}"),
            Val::Int(i) => write!(f, "{i}"),
            Val::Double(d) => write!(f, "{d}"),
            Val::Array(a) => write!(f, "{a:?}"),
            Val::Other(s) => write!(f, "{s}"),
        }
    }
}

fn val(v: &Option<AnyValue>) -> Val {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Val::Str(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Val::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Val::Int(*i),
        Some(any_value::Value::DoubleValue(d)) => Val::Double(*d),
        Some(any_value::Value::ArrayValue(a)) => {
            Val::Array(a.values.iter().map(|x| val(&Some(x.clone()))).collect())
        }
        other => Val::Other(format!("{other:?}")),
    }
}

/// Attributes as an ordered map.
pub(crate) type Attrs = BTreeMap<String, Val>;

fn attrs(kvs: &[KeyValue]) -> Attrs {
    kvs.iter()
        .map(|kv| (kv.key.clone(), val(&kv.value)))
        .collect()
}

/// A span event.
#[derive(Debug, Clone)]
pub(crate) struct EventRec {
    pub name: String,
    pub time_ns: u64,
    pub attrs: Attrs,
}

/// One exported span, flattened.
#[derive(Debug, Clone)]
pub(crate) struct SpanRec {
    pub protocol: Protocol,
    pub name: String,
    /// Lowercase hex.
    pub trace_id: String,
    pub span_id: String,
    /// W3C `tracestate` as exported.
    pub trace_state: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// OTLP span kind (2 = server, 3 = client).
    pub kind: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attrs: Attrs,
    pub events: Vec<EventRec>,
    /// 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    pub resource: Attrs,
}

impl SpanRec {
    /// The attribute `key`, panicking with the span's attributes when absent.
    #[track_caller]
    pub(crate) fn attr(&self, key: &str) -> &Val {
        self.attrs.get(key).unwrap_or_else(|| {
            panic!(
                "span {:?}: expected attribute {key:?}; attributes: {:#?}",
                self.name, self.attrs
            )
        })
    }

    /// String attribute `key` (panics when absent or not a string).
    #[track_caller]
    pub(crate) fn str(&self, key: &str) -> &str {
        let v = self.attr(key);
        v.as_str().unwrap_or_else(|| {
            panic!(
                "span {:?}: attribute {key:?} should be a string, is {v:?}",
                self.name
            )
        })
    }

    /// Numeric attribute `key` (panics when absent or not a number).
    #[track_caller]
    pub(crate) fn num(&self, key: &str) -> f64 {
        let v = self.attr(key);
        v.as_f64().unwrap_or_else(|| {
            panic!(
                "span {:?}: attribute {key:?} should be a number, is {v:?}",
                self.name
            )
        })
    }

    /// `tokentap.outcome` is `outcome` (whatever `error.type` says).
    #[track_caller]
    pub(crate) fn assert_outcome_is(&self, outcome: &str) {
        assert_eq!(
            self.str(super::names::OUTCOME),
            outcome,
            "span {:?} outcome; attributes: {:#?}",
            self.name,
            self.attrs
        );
    }

    /// Assert `tokentap.outcome` and `error.type`.
    #[track_caller]
    pub(crate) fn assert_outcome(&self, outcome: &str, error_type: &str) {
        self.assert_outcome_is(outcome);
        assert_eq!(
            self.str(super::names::ERROR_TYPE),
            error_type,
            "span {:?} error.type",
            self.name
        );
    }

    /// Every string in the span: name, attributes, events, status, resource.
    pub(crate) fn all_strings(&self) -> Vec<String> {
        let mut v = vec![self.name.clone(), self.status_message.clone()];
        for (k, x) in self.attrs.iter().chain(self.resource.iter()) {
            v.push(k.clone());
            v.extend(x.strings());
        }
        for e in &self.events {
            v.push(e.name.clone());
            for (k, x) in &e.attrs {
                v.push(k.clone());
                v.extend(x.strings());
            }
        }
        v
    }
}

/// A histogram data point.
#[derive(Debug, Clone)]
pub(crate) struct Hist {
    pub count: u64,
    pub sum: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub bounds: Vec<f64>,
    pub buckets: Vec<u64>,
}

/// A metric point's value.
#[derive(Debug, Clone)]
pub(crate) enum PointValue {
    Sum(f64),
    Gauge(f64),
    Histogram(Hist),
    Other,
}

/// One exported metric data point, flattened.
#[derive(Debug, Clone)]
pub(crate) struct MetricPoint {
    pub protocol: Protocol,
    /// Index of the export request that carried it.
    pub batch: usize,
    pub name: String,
    pub unit: String,
    pub description: String,
    pub attrs: Attrs,
    pub value: PointValue,
    pub resource: Attrs,
}

impl MetricPoint {
    /// String attribute `key`, if present.
    pub(crate) fn attr_str(&self, key: &str) -> Option<&str> {
        self.attrs.get(key).and_then(Val::as_str)
    }

    /// The histogram value, panicking when the point is not a histogram.
    #[track_caller]
    pub(crate) fn hist(&self) -> &Hist {
        match &self.value {
            PointValue::Histogram(h) => h,
            other => panic!(
                "metric {:?}: expected a histogram point, got {other:?}",
                self.name
            ),
        }
    }

    /// Sum or gauge value, panicking otherwise.
    #[track_caller]
    pub(crate) fn number(&self) -> f64 {
        match &self.value {
            PointValue::Sum(v) | PointValue::Gauge(v) => *v,
            other => panic!(
                "metric {:?}: expected a sum/gauge point, got {other:?}",
                self.name
            ),
        }
    }

    /// Every string in the point (name, attributes, resource).
    pub(crate) fn all_strings(&self) -> Vec<String> {
        let mut v = vec![
            self.name.clone(),
            self.unit.clone(),
            self.description.clone(),
        ];
        for (k, x) in self.attrs.iter().chain(self.resource.iter()) {
            v.push(k.clone());
            v.extend(x.strings());
        }
        v
    }
}
