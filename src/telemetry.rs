//! Telemetry (recording): finished `Measurement`s in; span records, GenAI
//! metrics and one access-log line per request out, handed to `ship` (which
//! puts them on the wire) and to `watch` (live windows, SLOs, agent-session
//! rollups). Never blocks the request path.
//!
//! Everything here is owned by one `Telemetry` value (no global providers),
//! so several instances can live in one process. Span records are batched
//! on tokentap's own thread (`span_export`) for `ship`'s exporters; the
//! constructors that start exporters, and the Prometheus scrape, are in
//! `ship` (an `impl Telemetry` there). `begin` and `finish` only record.

mod access_log;
pub mod cardinality;
pub(crate) mod drops;
pub(crate) mod exemplars;
mod in_flight;
mod instruments;
pub mod pull;
pub(crate) mod sampling;
pub(crate) mod span;
pub(crate) mod span_export;
pub(crate) mod span_record;
mod ws_session;

pub use self::ws_session::WsSessionTelemetry;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;

use http::HeaderMap;
use opentelemetry::metrics::{BoundHistogram, Meter, MeterProvider as _};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use self::access_log::access_log;
use self::cardinality::CardinalityGuard;
use self::drops::DropCounts;
use self::in_flight::{InFlight, InFlightGuard};
use self::instruments::{
    ActiveRequest, FinishAttrs, FinishRecord, GapTally, Instruments, OpClass, overhead_attrs,
};
use self::pull::{Exposition, PullReader};
use self::span::{TraceHeaders, error_type, inject_trace_context};
use self::span_export::SpanPipeline;
use self::span_record::{RequestSpan, SpanCost, SpanRecord, SpanStart, Tracing};
use crate::attrs::*;
use crate::config::TelemetryConfig;
use crate::meter::{Measurement, Recorder, RequestFacts, SharedState, ToolUse};
use crate::pricing::{self, CostRecord, PriceBook, Priced};
use crate::providers::{ProviderKind, ServerTool};
use crate::watch::live::{Live, LiveRequest, Sample, SeriesKey};
use crate::watch::{rollups, slo};

/// Longest wait for flush and shutdown.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// Distinct `error.type` metric values before `other` (values come from
/// upstream bodies, so they are capped like models).
const MAX_ERROR_TYPES: usize = 64;

/// Process-wide telemetry: providers, instruments, cardinality guards.
/// Cheap to clone and share.
#[derive(Debug, Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    meter_provider: SdkMeterProvider,
    /// Sampling and ids for new spans.
    tracing: Tracing,
    /// Finished spans to the exporter; `None` without a span exporter
    /// (then no record is built).
    spans: Option<SpanPipeline>,
    propagator: TraceContextPropagator,
    instruments: Instruments,
    models: CardinalityGuard,
    response_models: CardinalityGuard,
    tenants: CardinalityGuard,
    error_types: CardinalityGuard,
    /// `gen_ai.tool.name` values (capped like models).
    tool_names: CardinalityGuard,
    drops: Arc<DropCounts>,
    access_log: bool,
    live: Live,
    /// Slowdown detection; `None` without `[[slo]]`.
    slo: Option<slo::Slo>,
    /// The Prometheus pull reader, when `init_with_prometheus` built one.
    pull: Option<PullReader>,
    /// For instruments registered after start-up (`observe_drains`); `None`
    /// without a reader.
    meter: Option<Meter>,
    /// Observable instruments registered after start-up, kept alive.
    observed: std::sync::Mutex<Vec<Box<dyn std::any::Any + Send + Sync>>>,
    /// Requests in flight per route and model.
    in_flight: Arc<InFlight>,
    /// `telemetry.prompt_size_class`.
    prompt_size_class: bool,
    /// `telemetry.load_class`.
    load_class: bool,
    /// The comparison windows (`/api/compare`) and the load classes.
    compare: Arc<crate::watch::compare::Compare>,
    /// `telemetry.prometheus_scope_labels` and `prometheus_bucket_stride`.
    exposition: Exposition,
    /// Prices for finished requests; swapped on reload, `None` = no pricing.
    prices: ArcSwapOption<PriceBook>,
    /// Per-agent-session totals (`/api/sessions`), every request with an
    /// agent session.
    rollups: rollups::SessionRollups,
}

/// Telemetry could not start (bad exporter settings).
#[derive(Debug, thiserror::Error)]
#[error("telemetry: {0}")]
pub struct TelemetryError(pub String);

/// Telemetry that never reached the collector, since start-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dropped {
    /// Spans dropped by the full batch queue or in failed exports.
    pub spans: u64,
    /// Metric data points in failed exports.
    pub data_points: u64,
}

impl Telemetry {
    #[allow(clippy::too_many_arguments, reason = "one call per init path")]
    pub(crate) fn build(
        cfg: &TelemetryConfig,
        resource: Resource,
        drops: Arc<DropCounts>,
        tracing: Tracing,
        spans: Option<SpanPipeline>,
        meters: MeterProviderBuilder,
        has_reader: bool,
        pull: Option<PullReader>,
    ) -> Telemetry {
        let meter_provider = meters
            .with_resource(resource)
            .with_view(cardinality::series_limit(cfg.max_series))
            .build();
        let meter = meter_provider.meter_with_scope(scope());
        let late_meter = has_reader.then(|| meter.clone());
        // An observable instrument with no reader only logs an SDK error.
        // Exemplars only serve the pull reader's OpenMetrics scrape; series
        // past `max_series` fold into the SDK's overflow series anyway.
        let exemplar_sets = if pull.is_some() { cfg.max_series } else { 0 };
        let instruments = Instruments::new(
            &meter,
            cfg.semconv,
            has_reader.then(|| drops.clone()),
            exemplar_sets,
        );
        let live = Live::start(&cfg.live);
        let slo = slo::Slo::start(&cfg.slo, &meter, has_reader, &live);
        let inner = Inner {
            meter_provider,
            tracing,
            spans,
            propagator: TraceContextPropagator::new(),
            instruments,
            models: CardinalityGuard::new(cfg.max_models),
            response_models: CardinalityGuard::new(cfg.max_models),
            tenants: CardinalityGuard::new(cfg.max_tenants),
            error_types: CardinalityGuard::new(MAX_ERROR_TYPES),
            tool_names: CardinalityGuard::new(cfg.max_models),
            drops,
            access_log: cfg.access_log,
            live,
            slo,
            pull,
            meter: late_meter,
            observed: std::sync::Mutex::new(Vec::new()),
            in_flight: Arc::default(),
            prompt_size_class: cfg.prompt_size_class,
            load_class: cfg.load_class,
            compare: Arc::new(crate::watch::compare::Compare::new(&cfg.compare)),
            exposition: Exposition {
                scope_labels: cfg.prometheus_scope_labels,
                bucket_stride: cfg.prometheus_bucket_stride,
            },
            prices: ArcSwapOption::empty(),
            rollups: rollups::SessionRollups::new(cfg.sessions),
        };
        let telemetry = Telemetry {
            inner: Arc::new(inner),
        };
        telemetry.observe_in_flight();
        telemetry
    }

    /// Report `tokentap.requests.in_flight` per route and model at each
    /// collection.
    fn observe_in_flight(&self) {
        self.observe(|meter| {
            let in_flight = self.inner.in_flight.clone();
            meter
                .u64_observable_gauge(M_IN_FLIGHT)
                .with_unit("{request}")
                .with_description("Requests in flight, per route and model.")
                .with_callback(move |obs| {
                    for (route, model, n) in in_flight.snapshot() {
                        let mut attrs = vec![KeyValue::new(ROUTE, route)];
                        if let Some(model) = model {
                            attrs.push(KeyValue::new(GEN_AI_REQUEST_MODEL, model));
                        }
                        obs.observe(n, &attrs);
                    }
                })
                .build()
        });
    }

    /// Build an observable instrument (or several) with the late meter and
    /// keep it alive, since its callback runs only while it lives; nothing
    /// without a reader.
    fn observe<I: std::any::Any + Send + Sync>(&self, build: impl FnOnce(&Meter) -> I) {
        let Some(meter) = &self.inner.meter else {
            return;
        };
        let instrument = build(meter);
        if let Ok(mut kept) = self.inner.observed.lock() {
            kept.push(Box::new(instrument));
        }
    }

    /// A gauge without attributes reporting `value()` at each collection.
    fn observe_gauge(
        &self,
        name: &'static str,
        unit: &'static str,
        description: &'static str,
        value: impl Fn() -> u64 + Send + Sync + 'static,
    ) {
        self.observe(|meter| {
            meter
                .u64_observable_gauge(name)
                .with_unit(unit)
                .with_description(description)
                .with_callback(move |obs| obs.observe(value(), &[]))
                .build()
        });
    }

    /// Start one request's telemetry: a span continuing the client's W3C
    /// trace context from `headers`, plus the per-request recorder.
    pub fn begin(&self, facts: &RequestFacts, headers: &HeaderMap) -> RequestTelemetry {
        let parent = self.inner.propagator.extract(&TraceHeaders(headers));
        self.begin_in(facts, &parent)
    }

    /// Like `begin`, with the span a child of `parent` (a WebSocket
    /// session's response spans).
    fn begin_in(&self, facts: &RequestFacts, parent: &Context) -> RequestTelemetry {
        let inner = &self.inner;
        let op = span::operation_name(facts);
        let provider = facts.provider.as_str();

        let model = facts
            .request_model
            .as_deref()
            .map(|m| inner.models.admit(m));
        let tenant = facts.tenant.as_deref().map(|t| inner.tenants.admit(t));
        let mut attrs = Vec::with_capacity(14);
        attrs.push(KeyValue::new(GEN_AI_OPERATION_NAME, op));
        attrs.push(KeyValue::new(GEN_AI_PROVIDER_NAME, provider));
        if let Some(model) = &model {
            attrs.push(KeyValue::new(GEN_AI_REQUEST_MODEL, model.clone()));
        }
        attrs.push(KeyValue::new(SERVER_ADDRESS, facts.server_address.clone()));
        attrs.push(KeyValue::new(SERVER_PORT, i64::from(facts.server_port)));
        attrs.push(KeyValue::new(ROUTE, facts.route.clone()));
        if let Some(tenant) = &tenant {
            attrs.push(KeyValue::new(TENANT, tenant.clone()));
        }
        attrs.push(KeyValue::new(GEN_AI_REQUEST_STREAM, facts.stream));
        let (in_flight, concurrency, first_of_pair) =
            inner.in_flight.enter(&facts.route, model.as_ref());
        let live = inner.live.begin(SeriesKey {
            route: facts.route.clone(),
            model,
            tenant,
        });

        // Gaps are folded per chunk and recorded at the end through
        // handles bound here, once.
        let gaps = facts.stream.then(|| ChunkGaps {
            per_chunk: ChunkGaps::bind(&inner.instruments, &attrs),
            gap: inner.instruments.chunk_gap.bind(&attrs),
            tally: GapTally::default(),
        });
        let active = inner.instruments.active_start([
            KeyValue::new(ROUTE, facts.route.clone()),
            KeyValue::new(GEN_AI_PROVIDER_NAME, provider),
        ]);

        // Sampling and ids only: the span's name and attributes are
        // written from the finished record, on the export thread.
        let span = inner.tracing.start(parent);

        RequestTelemetry {
            inner: self.inner.clone(),
            span,
            attrs,
            gaps,
            _active: active,
            live,
            _in_flight: in_flight,
            in_flight_at_start: concurrency,
            load_class: inner.compare.classes().index(concurrency),
            first_of_pair,
            ws_session_kept: None,
            frame_overhead: None,
        }
    }

    /// Flush pending spans and metrics (bounded wait).
    pub fn flush(&self) {
        off_runtime(|| {
            if let Some(spans) = &self.inner.spans {
                spans.flush(SHUTDOWN_TIMEOUT);
            }
            let _ = self.inner.meter_provider.force_flush();
        });
    }

    /// Flush and stop exporters (bounded wait). Later calls do nothing.
    /// Call it before the last clone is dropped: dropping shuts down too,
    /// but blocks the dropping thread.
    pub fn shutdown(&self) {
        self.inner.tracing.shut_down();
        off_runtime(|| {
            if let Some(spans) = &self.inner.spans {
                spans.shutdown(SHUTDOWN_TIMEOUT);
            }
            let _ = self
                .inner
                .meter_provider
                .shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        });
        // The collector may be why these were dropped: say so where it shows.
        let d = self.dropped();
        if d != Dropped::default() {
            tracing::warn!(
                spans = d.spans,
                data_points = d.data_points,
                "telemetry dropped {} spans and {} metric data points since start-up",
                d.spans,
                d.data_points
            );
        }
    }

    /// Count and log one request that matched no route (answered 404):
    /// `tokentap.requests` with only `tokentap.outcome = no_route`, and an
    /// access-log line with its method and path (never the query, which
    /// may carry a key).
    pub fn record_no_route(&self, method: &http::Method, path: &str) {
        self.inner
            .instruments
            .count_request(&[KeyValue::new(OUTCOME, OUTCOME_NO_ROUTE)]);
        if self.inner.access_log {
            access_log::no_route_log(method, path);
        }
    }

    /// Count one configuration reload attempt (`tokentap.config.reloads`).
    pub fn record_config_reload(&self, success: bool) {
        let result = if success { "success" } else { "failure" };
        self.inner
            .instruments
            .config_reloads
            .add(1, &[KeyValue::new(RELOAD_RESULT, result)]);
    }

    /// Report `active()` as `tokentap.drains.active` at each collection
    /// (upstream bodies still read after their client left).
    pub fn observe_drains(&self, active: impl Fn() -> u64 + Send + Sync + 'static) {
        self.observe_gauge(
            M_DRAINS_ACTIVE,
            "{drain}",
            "Upstream bodies still being read after their client left.",
            active,
        );
    }

    /// Report each served certificate's seconds until expiry as
    /// `tokentap.tls.certificate.expiry` (attributes `tokentap.listener`,
    /// `tokentap.tls.server_name`) at each collection.
    pub fn observe_certificates(&self, tls: Vec<Arc<crate::server::tls::Tls>>) {
        if tls.is_empty() {
            return;
        }
        self.observe(|meter| {
            meter
                .i64_observable_gauge(M_TLS_CERT_EXPIRY)
                .with_unit("s")
                .with_description(
                    "Seconds until a served TLS certificate expires (negative once expired).",
                )
                .with_callback(move |obs| {
                    for t in &tls {
                        for cert in t.expiry().iter() {
                            obs.observe(
                                cert.seconds_left(),
                                &[
                                    KeyValue::new("tokentap.listener", t.listener),
                                    KeyValue::new("tokentap.tls.server_name", cert.name.clone()),
                                ],
                            );
                        }
                    }
                })
                .build()
        });
    }

    /// Report `errors()` as `tokentap.state.errors` at each collection
    /// (state store operations that failed or timed out).
    pub fn observe_state_errors(&self, errors: impl Fn() -> u64 + Send + Sync + 'static) {
        self.observe(|meter| {
            meter
                .u64_observable_counter(M_STATE_ERRORS)
                .with_unit("{error}")
                .with_description("State store operations that failed or timed out.")
                .with_callback(move |obs| obs.observe(errors(), &[]))
                .build()
        });
    }

    /// Report `active()` as `tokentap.websocket.sessions.active` at each
    /// collection (WebSocket sessions being relayed).
    pub fn observe_ws_sessions(&self, active: impl Fn() -> u64 + Send + Sync + 'static) {
        self.observe_gauge(
            M_WEBSOCKET_SESSIONS_ACTIVE,
            "{session}",
            "WebSocket sessions being relayed.",
            active,
        );
    }

    /// Report the upstream HTTP/2 pool at each collection:
    /// `tokentap.upstream.pool.{connections,streams,queued}` per upstream
    /// host. `figures` returns `(host, connections, streams, queued)`;
    /// hosts come from the configured routes, so the set is bounded.
    pub fn observe_upstream_pool(
        &self,
        figures: impl Fn() -> Vec<(String, u64, u64, u64)> + Send + Sync + 'static,
    ) {
        let figures = Arc::new(figures);
        self.observe(|meter| {
            let gauge = |name: &'static str,
                         unit: &'static str,
                         desc: &'static str,
                         pick: fn(&(String, u64, u64, u64)) -> u64| {
                let figures = figures.clone();
                meter
                    .u64_observable_gauge(name)
                    .with_unit(unit)
                    .with_description(desc)
                    .with_callback(move |obs| {
                        for f in figures() {
                            obs.observe(pick(&f), &[KeyValue::new(UPSTREAM_HOST, f.0.clone())]);
                        }
                    })
                    .build()
            };
            [
                gauge(
                    M_POOL_CONNECTIONS,
                    "{connection}",
                    "Open HTTP/2 upstream connections that take new streams.",
                    |f| f.1,
                ),
                gauge(
                    M_POOL_STREAMS,
                    "{stream}",
                    "HTTP/2 streams in flight on upstream connections.",
                    |f| f.2,
                ),
                gauge(
                    M_POOL_QUEUED,
                    "{request}",
                    "Requests waiting for an upstream HTTP/2 connection or stream slot.",
                    |f| f.3,
                ),
            ]
        });
    }

    /// Price finished requests with `book` from now on (start-up and each
    /// reload; requests finishing later use it, whenever they started).
    pub fn set_prices(&self, book: Arc<PriceBook>) {
        self.inner.prices.store(Some(book));
    }

    /// The pull reader `/metrics` is collected from (with the exposition
    /// settings), when there is one.
    pub(crate) fn pull(&self) -> Option<(&PullReader, Exposition)> {
        (self.inner.pull.as_ref()).map(|p| (p, self.inner.exposition))
    }

    /// The exemplars kept so far (for the OpenMetrics scrape).
    pub(crate) fn exemplars(&self) -> exemplars::Snapshot {
        self.inner.instruments.exemplars()
    }

    /// Spans leave by OTLP: export is on (sampling may still drop some).
    pub fn exports_spans(&self) -> bool {
        self.inner.spans.is_some()
    }

    /// Live statistics (dashboard, demo table, slowdown detection).
    pub fn live(&self) -> &Live {
        &self.inner.live
    }

    /// The comparison from production traffic (`/api/compare`).
    pub fn compare(&self) -> &crate::watch::compare::Compare {
        &self.inner.compare
    }

    /// Per-agent-session rollups (`/api/sessions`, the dashboard).
    pub fn sessions(&self) -> &rollups::SessionRollups {
        &self.inner.rollups
    }

    /// Telemetry dropped so far (also exported as `tokentap.telemetry.dropped`).
    pub fn dropped(&self) -> Dropped {
        Dropped {
            spans: self.inner.drops.spans(),
            data_points: self.inner.drops.data_points(),
        }
    }
}

/// tokentap's instrumentation scope, for spans and metrics.
pub(crate) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

pub(crate) fn resource(cfg: &TelemetryConfig) -> Resource {
    // `Resource::builder` also reads OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME;
    // configured values win.
    Resource::builder()
        .with_attributes(
            cfg.resource_attributes
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .with_service_name(cfg.service_name.clone())
        .build()
}

/// Run a blocking SDK call without stalling a tokio worker the exporter may need.
fn off_runtime<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Per-chunk histograms, bound to the request's attributes, and the gaps
/// folded so far (no lock per chunk: the histograms are written once, at
/// the end).
struct ChunkGaps {
    /// `time_per_output_chunk` under the current and the v1.41.0 name,
    /// each when `telemetry.semconv` emits it.
    per_chunk: [Option<BoundHistogram<f64>>; 2],
    gap: BoundHistogram<f64>,
    tally: GapTally,
}

impl ChunkGaps {
    fn bind(ins: &Instruments, attrs: &[KeyValue]) -> [Option<BoundHistogram<f64>>; 2] {
        [
            (ins.semconv.latest()).then(|| ins.inference_time_per_output_chunk.bind(attrs)),
            (ins.semconv.legacy()).then(|| ins.time_per_output_chunk.bind(attrs)),
        ]
    }

    fn record(&self) {
        self.tally.replay(|secs| {
            for h in self.per_chunk.iter().flatten() {
                h.record(secs);
            }
            self.gap.record(secs);
        });
    }
}

/// One request's span and pre-built metric attributes.
pub struct RequestTelemetry {
    inner: Arc<Inner>,
    /// The span's context and parent; its record is built at `finish`.
    span: SpanStart,
    /// Bounded metric attributes known at `begin`.
    attrs: Vec<KeyValue>,
    gaps: Option<ChunkGaps>,
    _active: ActiveRequest,
    /// Series and in-flight token for the live statistics.
    live: LiveRequest,
    /// Holds the request in `tokentap.requests.in_flight`.
    _in_flight: InFlightGuard,
    /// The count it found when it started, itself included.
    in_flight_at_start: u64,
    /// Its load class (index into `Inner::load_classes`).
    load_class: usize,
    /// The first request its (route, model) pair has seen.
    first_of_pair: bool,
    /// A WebSocket response: set when its span is kept, so its WebSocket
    /// session's span is kept too.
    ws_session_kept: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// `tokentap.proxy.overhead` for response frames, bound at the first
    /// sampled frame.
    frame_overhead: Option<BoundHistogram<f64>>,
}

impl std::fmt::Debug for RequestTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestTelemetry")
            .field("span", &self.span.context)
            .field("attrs", &self.attrs)
            .finish_non_exhaustive()
    }
}

impl RequestTelemetry {
    /// Write `traceparent` (and `tracestate`) for the upstream request so the
    /// provider call sits inside this request's span.
    pub fn inject(&self, headers: &mut HeaderMap) {
        inject_trace_context(&self.span.context, headers);
    }
}

impl Recorder for RequestTelemetry {
    fn chunk_gap(&mut self, gap: Duration) {
        if let Some(g) = &mut self.gaps {
            g.tally.add(gap);
        }
    }

    fn chunk_overhead(&mut self, overhead: Duration) {
        let (inner, attrs) = (&self.inner, &self.attrs);
        self.frame_overhead
            .get_or_insert_with(|| {
                inner
                    .instruments
                    .proxy_overhead
                    .bind(&overhead_attrs(attrs, STAGE_RESPONSE_FRAME))
            })
            .record(overhead.as_secs_f64());
    }

    fn provider(&mut self, provider: ProviderKind) {
        // Nothing was recorded under the request-time label but the
        // in-flight gauge, which moves over; the span takes the provider
        // when it ends.
        let name = KeyValue::new(GEN_AI_PROVIDER_NAME, provider.as_str());
        if let Some(kv) = self
            .attrs
            .iter_mut()
            .find(|kv| kv.key.as_str() == GEN_AI_PROVIDER_NAME)
        {
            *kv = name.clone();
        }
        if let Some(g) = &mut self.gaps {
            let ins = &self.inner.instruments;
            g.per_chunk = ChunkGaps::bind(ins, &self.attrs);
            g.gap = ins.chunk_gap.bind(&self.attrs);
        }
        self._active.relabel(&self.inner.instruments, name);
    }

    fn finish(self: Box<Self>, mut m: Measurement) {
        let this = *self;
        if let Some(g) = &this.gaps {
            g.record();
        }
        // The sampling decision, made now that the request is over; only
        // with a span pipeline (nothing is exported without one). A
        // dropped span costs this decision and nothing more: no record,
        // no cost facts, no exemplar.
        let kept = this.inner.spans.as_ref().and_then(|spans| {
            // Breached SLOs for this route and model: one atomic load when none.
            let slo = this.inner.slo.as_ref();
            let slo = slo.and_then(|s| s.mark(this.live.key()));
            let kept = this.inner.tracing.sampler.decide(
                &m,
                &this.span.head,
                slo.is_some(),
                this.first_of_pair,
            )?;
            Some((spans, slo, kept))
        });
        if kept.is_some()
            && let Some(flag) = &this.ws_session_kept
        {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let recorded = kept.is_some();
        let (cost, tier, span_cost) = match this.record_batch(&m, recorded) {
            Some(batch) => {
                // Each model's cost is already recorded under its label.
                this.record_metrics(&m, None, recorded);
                batch
            }
            None => {
                let priced = this.record_cost(&m, recorded);
                this.record_metrics(&m, priced.0, recorded);
                priced
            }
        };
        this.record_live(&m, cost, recorded);
        if let Some(model) = &this.live.key().model {
            let route = &this.live.key().route;
            this.inner.compare.record(route, model, this.load_class, &m);
        }
        if this.inner.access_log {
            access_log(&m, &this.span.context, recorded);
        }
        // Every request, sampled or not; one lock, only with a session.
        let share = this
            .inner
            .rollups
            .record_local(&m, rollups::RequestCost::of(cost));
        let kept = kept.map(|(_, slo, kept)| (slo, kept));
        let load_class = this.inner.compare.classes().label(this.load_class).clone();
        let (inner, start, in_flight) = (this.inner, this.span, this.in_flight_at_start);
        let push = move |m: Measurement| {
            let (Some(spans), Some((slo, kept))) = (&inner.spans, kept) else {
                return;
            };
            spans.push(SpanRecord::Request(Box::new(RequestSpan {
                start,
                m,
                in_flight,
                load_class,
                tier,
                cost: span_cost,
                slo,
                kept,
            })));
        };
        match share {
            // With a state store the span says whether the store took the
            // session's figures, so it goes once the store answered.
            Some(share) => share.send(Box::new(move |stored| {
                if m.shared_state != Some(SharedState::Local) {
                    m.shared_state = Some(if stored {
                        SharedState::Store
                    } else {
                        SharedState::Local
                    });
                }
                push(m)
            })),
            None => push(m),
        }
    }
}

impl RequestTelemetry {
    /// Price the request (`pricing`): what the cost counters and the live
    /// statistics need of it, and, when the span is `recorded`, the
    /// service tier and cost facts for it.
    fn record_cost(
        &self,
        m: &Measurement,
        recorded: bool,
    ) -> (Option<CostRecord>, Option<&'static str>, Option<SpanCost>) {
        let book = self.inner.prices.load();
        let Some(book) = book.as_deref() else {
            return (None, None, None);
        };
        let request = pricing::Request {
            route: &m.request.route,
            provider: m.request.provider,
            response_model: m.response_model.as_deref(),
            request_model: m.request.request_model.as_deref(),
            usage: &m.usage,
            counted_output: m.output_tokens,
            estimated: m.estimated(),
            requested_tier: m.request.service_tier,
            at: m.request.start_wall,
        };
        let tier = m.usage.service_tier.or(m.request.service_tier);
        let tier = tier.map(|t| t.as_str()).filter(|_| recorded);
        match book.price(&request) {
            Priced::Cost(c) => {
                let source = c.entry.source();
                // A provider-reported cost already includes its tool fees.
                let fees = (source != pricing::CostSource::Provider && m.tools.server.total() > 0)
                    .then(|| book.tool_fees(&request, &m.tools.server));
                let tools_usd = fees.map(|f| f.total);
                let usd = c.usd + tools_usd.unwrap_or(0.0);
                let span = recorded.then(|| SpanCost::Priced {
                    usd,
                    source: source.as_str(),
                    estimated: c.estimated,
                    entry: c.entry.reference(),
                    tools: tools_usd,
                });
                let cost = CostRecord::Priced {
                    usd,
                    source,
                    estimated: c.estimated,
                };
                (Some(cost), tier, span)
            }
            Priced::Unpriced => (
                Some(CostRecord::Unpriced),
                tier,
                recorded.then_some(SpanCost::Unpriced),
            ),
            Priced::Nothing => (None, tier, None),
        }
    }

    /// A batch result file counted here: each model's tokens and cost,
    /// priced at batch rates, recorded once under that model's capped
    /// label; the summed cost for the span and the live statistics.
    /// `None` for any other request, and for a download that counts
    /// nothing.
    fn record_batch(
        &self,
        m: &Measurement,
        recorded: bool,
    ) -> Option<(Option<CostRecord>, Option<&'static str>, Option<SpanCost>)> {
        let batch = m.batch.as_ref().filter(|b| !b.models.is_empty())?;
        let inner = &self.inner;
        let book = inner.prices.load();
        let mut attrs = Vec::with_capacity(self.attrs.len() + 3);
        attrs.extend_from_slice(&self.attrs);
        attrs.push(KeyValue::new(OUTCOME, m.outcome.as_str()));
        attrs.push(KeyValue::new(TOKENS_ESTIMATED, false));
        let (mut usd, mut source, mut unpriced) = (0.0, None, false);
        for (model, usage) in &batch.models {
            attrs.truncate(self.attrs.len() + 2);
            attrs.push(KeyValue::new(
                GEN_AI_RESPONSE_MODEL,
                inner.response_models.admit(model),
            ));
            let usage = crate::providers::Usage {
                service_tier: Some(crate::providers::ServiceTier::Batch),
                ..*usage
            };
            let request = pricing::Request {
                route: &m.request.route,
                provider: m.request.provider,
                response_model: Some(model),
                request_model: None,
                usage: &usage,
                counted_output: None,
                estimated: false,
                requested_tier: Some(crate::providers::ServiceTier::Batch),
                at: m.request.start_wall,
            };
            let cost = match book.as_deref().map(|b| b.price(&request)) {
                Some(Priced::Cost(c)) => {
                    usd += c.usd;
                    source.get_or_insert(c.entry.source());
                    Some(CostRecord::Priced {
                        usd: c.usd,
                        source: c.entry.source(),
                        estimated: false,
                    })
                }
                Some(Priced::Unpriced) => {
                    unpriced = true;
                    Some(CostRecord::Unpriced)
                }
                Some(Priced::Nothing) | None => None,
            };
            inner.instruments.record_batch_model(&attrs, &usage, cost);
        }
        let (cost, span) = match source {
            Some(source) => (
                Some(CostRecord::Priced {
                    usd,
                    source,
                    estimated: false,
                }),
                recorded.then(|| SpanCost::Priced {
                    usd,
                    source: source.as_str(),
                    estimated: false,
                    entry: "batch: per model".into(),
                    tools: None,
                }),
            ),
            None if unpriced => (
                Some(CostRecord::Unpriced),
                recorded.then_some(SpanCost::Unpriced),
            ),
            None => (None, None),
        };
        let tier = recorded.then_some(crate::providers::ServiceTier::Batch.as_str());
        Some((cost, tier, span))
    }

    /// One `try_send` to the live statistics; never waits. `exported`:
    /// the request's span is exported (sampling kept it).
    fn record_live(&self, m: &Measurement, cost: Option<CostRecord>, exported: bool) {
        let inner = &self.inner;
        let response_model = m.response_model.as_deref();
        let mut sample = Sample::new(
            self.live.key().clone(),
            m,
            response_model.map(|v| inner.response_models.admit(v)),
            error_type(m).map(|e| inner.error_types.admit(e)),
            self.span.context.trace_id(),
        );
        sample.in_flight = Some(self.in_flight_at_start);
        sample.span_exported = exported;
        match cost {
            Some(CostRecord::Priced { usd, .. }) => sample.cost_usd = Some(usd),
            Some(CostRecord::Unpriced) => sample.unpriced = true,
            None => {}
        }
        inner.live.finish(sample);
    }

    /// The metrics of every request; `exported`: its span is exported, so
    /// its trace id may serve as an exemplar.
    fn record_metrics(&self, m: &Measurement, cost: Option<CostRecord>, exported: bool) {
        let inner = &self.inner;
        let ins = &inner.instruments;
        // Room for the end-of-request attributes, so none reallocates.
        let mut attrs = Vec::with_capacity(self.attrs.len() + 6);
        attrs.extend_from_slice(&self.attrs);
        attrs.push(KeyValue::new(OUTCOME, m.outcome.as_str()));
        attrs.push(KeyValue::new(TOKENS_ESTIMATED, m.estimated()));
        if let Some(model) = &m.response_model {
            attrs.push(KeyValue::new(
                GEN_AI_RESPONSE_MODEL,
                inner.response_models.admit(model),
            ));
        }
        if let Some(err) = error_type(m) {
            attrs.push(KeyValue::new(ERROR_TYPE, inner.error_types.admit(err)));
        }

        let stream = m.request.stream;
        let ttft = m.time_to_first_token.map(|d| d.as_secs_f64());
        let class = match m.request.operation {
            Some(op) if op.is_embeddings() => OpClass::Embeddings,
            // Reading or managing a stored response: an operation other
            // than inference, with token metrics only when it counts usage.
            Some(op) if !op.is_inference() => OpClass::Unknown,
            Some(_) => OpClass::Inference,
            None => OpClass::Unknown,
        };
        let record = FinishRecord {
            class,
            split: !m.modalities.is_empty(),
            duration: m.duration.as_secs_f64(),
            ttft,
            first_chunk: ttft.filter(|_| stream),
            tpot: m.time_per_output_token().map(|d| d.as_secs_f64()),
            decode_tps: m.decode_tokens_per_second(),
            max_stall: m.max_gap.filter(|_| stream).map(|d| d.as_secs_f64()),
            pool_wait: m.pool_wait.map(|d| d.as_secs_f64()),
            input_tokens: m.usage.input,
            output_tokens: m.output_tokens.or(m.usage.output),
            visible_ttft: m.reasoning.time_to_first_visible.map(|d| d.as_secs_f64()),
            reasoning_duration: m.reasoning.thinking_time().map(|d| d.as_secs_f64()),
            reasoning_tokens: m.reasoning.tokens.map(|n| (n, m.reasoning.estimated())),
            prefill_tps: m.prefill_tokens_per_second(),
            request_overhead: m.request_overhead.map(|d| d.as_secs_f64()),
            cache_read_tokens: m.usage.cache_read,
            cache_write_tokens: m.usage.cache_creation,
            trace: exported
                .then(|| {
                    exemplars::TraceMark::new(&self.span.context, m.request.start_wall + m.duration)
                })
                .flatten(),
            cost,
        };
        // The decode-rate histogram takes the same set plus the load class,
        // the TTFT and prefill histograms both classes: one vector, the
        // classes last, `all` and `loaded` prefixes of it.
        let all = attrs.len();
        if inner.load_class {
            attrs.push(KeyValue::new(
                LOAD_CLASS,
                inner.compare.classes().label(self.load_class).clone(),
            ));
        }
        let loaded = attrs.len();
        if inner.prompt_size_class {
            attrs.push(KeyValue::new(
                PROMPT_SIZE_CLASS,
                m.prompt_size_class().as_str(),
            ));
        }
        let sets = FinishAttrs {
            all: &attrs[..all],
            sized: &attrs,
            loaded: &attrs[..loaded],
            begin: &self.attrs,
        };
        ins.record_finish(&sets, &record);
        if !m.modalities.is_empty() {
            ins.record_modalities(&attrs[..all], &m.modalities, &record);
        }
        if !m.tools.is_empty() {
            self.record_tools(&m.tools);
        }
    }

    /// `tokentap.tool.calls` by name and `tokentap.tool.server_calls` by
    /// tool, under the route and provider. Names pass the cardinality
    /// guard; calls it refuses, unnamed ones and those past the
    /// per-response name cap count under `other`.
    fn record_tools(&self, tools: &ToolUse) {
        let inner = &self.inner;
        let ins = &inner.instruments;
        let keep = |kv: &&KeyValue| matches!(kv.key.as_str(), ROUTE | GEN_AI_PROVIDER_NAME);
        let mut attrs: Vec<KeyValue> = self.attrs.iter().filter(keep).cloned().collect();
        let base = attrs.len();
        let named = tools.names.iter().zip(&tools.calls_by_name);
        let other = (tools.unnamed_calls() > 0).then_some((None, tools.unnamed_calls()));
        for (name, calls) in named.map(|(n, c)| (Some(n), *c)).chain(other) {
            let label = name.map_or_else(|| Arc::from(OTHER), |n| inner.tool_names.admit(n));
            attrs.truncate(base);
            attrs.push(KeyValue::new(GEN_AI_TOOL_NAME, label));
            ins.tool_calls.add(u64::from(calls), &attrs);
        }
        for tool in ServerTool::ALL {
            let calls = tools.server.get(tool);
            if calls > 0 {
                attrs.truncate(base);
                attrs.push(KeyValue::new(SERVER_TOOL, tool.as_str()));
                ins.server_tool_calls.add(u64::from(calls), &attrs);
            }
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests build timestamps and deadlines freely"
)]
pub(crate) mod tests;
