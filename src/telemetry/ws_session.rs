//! WebSocket session telemetry: the handshake's facts and trace headers
//! in; the WebSocket session span (parent of its response spans, which are recorded
//! like any request's) and the upstream `traceparent` out.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry::{Context, KeyValue};

use super::sampling::{Kept, Reason};
use super::span::{TraceHeaders, inject_trace_context, start_attributes};
use super::span_record::{SpanParts, SpanRecord, SpanStart, span_name};
use super::{RequestTelemetry, Telemetry};
use crate::attrs::*;
use crate::meter::RequestFacts;
use crate::meter::ws_session::WsSessionSummary;

/// A WebSocket session's span, and the context its response spans start from.
/// Clones share the span; the first `finish` or `refused` ends it, or, if
/// neither came, dropping the last clone (a handshake the client gave up
/// on): the span then ends with its start attributes and no outcome, as
/// the SDK ends a dropped span.
#[derive(Debug, Clone)]
pub struct WsSessionTelemetry {
    span: Arc<WsSessionSpan>,
}

#[derive(Debug)]
struct WsSessionSpan {
    telemetry: Telemetry,
    start: SpanStart,
    /// When the handshake arrived (for the end time of a dropped span).
    arrived: std::time::Instant,
    /// The WebSocket session's own context, parent of its response spans.
    cx: Context,
    /// Name, start time and start attributes; taken when the span ends
    /// (`None` once it has, or without a span pipeline).
    open: Mutex<Option<(String, SystemTime, Vec<KeyValue>)>>,
    /// Set when one of its responses' spans is kept: the WebSocket session's is too.
    response_kept: Arc<AtomicBool>,
}

impl Telemetry {
    /// Start a WebSocket session's span (continuing the client's W3C trace
    /// context from the handshake's `headers`).
    pub fn begin_ws_session(
        &self,
        facts: &RequestFacts,
        headers: &HeaderMap,
    ) -> WsSessionTelemetry {
        let inner = &self.inner;
        let parent = inner.propagator.extract(&TraceHeaders(headers));
        let start = inner.tracing.start(&parent);
        let open = inner.spans.is_some().then(|| {
            let mut attributes = Vec::new();
            start_attributes(facts, &mut attributes);
            (
                span_name("websocket", facts.request_model.as_deref()),
                facts.start_wall,
                attributes,
            )
        });
        WsSessionTelemetry {
            span: Arc::new(WsSessionSpan {
                telemetry: self.clone(),
                arrived: facts.start,
                cx: Context::new().with_remote_span_context(start.context.clone()),
                start,
                open: Mutex::new(open),
                response_kept: Arc::default(),
            }),
        }
    }
}

impl WsSessionSpan {
    /// End the span with `more` attributes and `error` as its status (unset
    /// when `None`), if it is recorded and not ended yet, and export it if
    /// sampling keeps it: a failed handshake, a WebSocket session one of whose
    /// responses was kept, or what the parent and the ratio say.
    fn end(&self, more: Vec<KeyValue>, error: Option<String>, end_time: SystemTime) {
        let Some(spans) = &self.telemetry.inner.spans else {
            return;
        };
        let open = self.open.lock().ok().and_then(|mut o| o.take());
        let Some((name, start_time, mut attributes)) = open else {
            return;
        };
        let sampler = &self.telemetry.inner.tracing.sampler;
        let kept = if error.is_some() {
            Some(Kept::always(Reason::Error))
        } else {
            sampler.ordinary(&self.start.head).or_else(|| {
                self.response_kept
                    .load(Ordering::Relaxed)
                    .then(|| Kept::always(Reason::Response))
            })
        };
        let Some(kept) = kept else {
            return;
        };
        attributes.extend(more);
        spans.push(SpanRecord::WsSession(Box::new(SpanParts {
            start: self.start.clone(),
            name,
            start_time,
            end_time,
            attributes,
            error,
            kept,
        })));
    }
}

impl Drop for WsSessionSpan {
    fn drop(&mut self) {
        let end_time = self.open.lock().ok().and_then(|o| {
            o.as_ref()
                .map(|(_, start_time, _)| *start_time + self.arrived.elapsed())
        });
        if let Some(end_time) = end_time {
            self.end(Vec::new(), None, end_time);
        }
    }
}

impl WsSessionTelemetry {
    /// Write `traceparent` for the upstream handshake: the upstream's work
    /// sits inside the WebSocket session span.
    pub fn inject(&self, headers: &mut HeaderMap) {
        inject_trace_context(&self.span.start.context, headers);
    }

    /// Start a response's telemetry, its span a child of the WebSocket session's.
    pub fn begin_child(&self, facts: &RequestFacts) -> RequestTelemetry {
        let mut child = self.span.telemetry.begin_in(facts, &self.span.cx);
        child.ws_session_kept = Some(self.span.response_kept.clone());
        child
    }

    /// The handshake did not switch protocols (refused, failed or answered
    /// with an error): the WebSocket session span ends with `code`.
    pub fn refused(self, facts: &RequestFacts, code: &str) {
        self.span.end(
            vec![
                KeyValue::new(WS_SESSION_END, "handshake_failed"),
                KeyValue::new(ERROR_TYPE, code.to_owned()),
            ],
            Some(code.to_owned()),
            facts.start_wall + facts.start.elapsed(),
        );
    }

    /// The WebSocket session is over.
    pub fn finish(self, facts: &RequestFacts, s: &WsSessionSummary) {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut a = vec![
            KeyValue::new(WS_SESSION_RESPONSES, int(s.responses)),
            KeyValue::new(WS_SESSION_INPUT_TOKENS, int(s.input_tokens)),
            KeyValue::new(WS_SESSION_OUTPUT_TOKENS, int(s.output_tokens)),
            KeyValue::new(WS_SESSION_ERRORS, int(s.errors)),
            KeyValue::new(WS_SESSION_END, s.end),
            KeyValue::new(WS_SESSION_BYTES_UP, int(s.bytes_up)),
            KeyValue::new(WS_SESSION_BYTES_DOWN, int(s.bytes_down)),
            KeyValue::new(HTTP_RESPONSE_STATUS_CODE, 101),
        ];
        let split = &s.modalities;
        for (key, v) in [
            (WS_SESSION_CACHE_READ, s.cached_input_tokens),
            (WS_SESSION_TEXT_INPUT, split.input_text),
            (WS_SESSION_AUDIO_INPUT, split.input_audio),
            (WS_SESSION_CACHE_READ_TEXT, split.cached_text),
            (WS_SESSION_CACHE_READ_AUDIO, split.cached_audio),
            (WS_SESSION_TEXT_OUTPUT, split.output_text),
            (WS_SESSION_AUDIO_OUTPUT, split.output_audio),
        ] {
            if let Some(v) = v {
                a.push(KeyValue::new(key, int(v)));
            }
        }
        if s.tool_calls > 0 {
            a.push(KeyValue::new(WS_SESSION_TOOL_CALLS, int(s.tool_calls)));
        }
        if let Some(c) = s.close_client {
            a.push(KeyValue::new(WS_SESSION_CLOSE_CODE_CLIENT, i64::from(c)));
        }
        if let Some(c) = s.close_upstream {
            a.push(KeyValue::new(WS_SESSION_CLOSE_CODE_UPSTREAM, i64::from(c)));
        }
        if let Some(why) = &s.unmetered {
            a.push(KeyValue::new(WS_SESSION_UNMETERED, why.clone()));
        }
        if let Some(model) = &s.model {
            a.push(KeyValue::new(GEN_AI_RESPONSE_MODEL, model.clone()));
        }
        self.span.end(a, None, facts.start_wall + s.duration);
    }
}
