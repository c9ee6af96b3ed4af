//! WebSocket session telemetry: the handshake's facts and trace headers
//! in; the session span (parent of its response spans, which are recorded
//! like any request's) and the upstream `traceparent` out.

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};

use super::attrs::*;
use super::span::{TraceHeaders, inject_trace_context, span_start_attributes};
use super::{RequestTelemetry, Telemetry};
use crate::meter::RequestFacts;
use crate::meter::session::SessionSummary;

/// A session's span, held in the context its response spans start from.
/// Clones share the span.
#[derive(Debug, Clone)]
pub struct SessionTelemetry {
    telemetry: Telemetry,
    cx: Context,
}

impl Telemetry {
    /// Start a WebSocket session's span (continuing the client's W3C trace
    /// context from the handshake's `headers`).
    pub fn begin_session(&self, facts: &RequestFacts, headers: &HeaderMap) -> SessionTelemetry {
        let inner = &self.inner;
        let parent = inner.propagator.extract(&TraceHeaders(headers));
        let name = match &facts.request_model {
            Some(model) => format!("websocket {model}"),
            None => "websocket".to_owned(),
        };
        let op = facts.operation.map_or(OPERATION_UNKNOWN, |o| o.name());
        let span = inner
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(facts.start_wall)
            .with_attributes(span_start_attributes(facts, op))
            .start_with_context(&inner.tracer, &parent);
        SessionTelemetry {
            telemetry: self.clone(),
            cx: parent.with_span(span),
        }
    }
}

impl SessionTelemetry {
    /// Write `traceparent` for the upstream handshake: the upstream's work
    /// sits inside the session span.
    pub fn inject(&self, headers: &mut HeaderMap) {
        inject_trace_context(self.cx.span().span_context(), headers);
    }

    /// Start a response's telemetry, its span a child of the session's.
    pub fn begin_child(&self, facts: &RequestFacts) -> RequestTelemetry {
        self.telemetry.begin_in(facts, &self.cx)
    }

    /// The handshake did not switch protocols (refused, failed or answered
    /// with an error): the session span ends with `code`.
    pub fn refused(self, facts: &RequestFacts, code: &str) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(SESSION_END, "handshake_failed"));
        span.set_attribute(KeyValue::new(ERROR_TYPE, code.to_owned()));
        span.set_status(Status::error(code.to_owned()));
        span.end_with_timestamp(facts.start_wall + facts.start.elapsed());
    }

    /// The session is over.
    pub fn finish(self, facts: &RequestFacts, s: &SessionSummary) {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let span = self.cx.span();
        let mut a = vec![
            KeyValue::new(SESSION_RESPONSES, int(s.responses)),
            KeyValue::new(SESSION_INPUT_TOKENS, int(s.input_tokens)),
            KeyValue::new(SESSION_OUTPUT_TOKENS, int(s.output_tokens)),
            KeyValue::new(SESSION_ERRORS, int(s.errors)),
            KeyValue::new(SESSION_END, s.end),
            KeyValue::new(SESSION_BYTES_UP, int(s.bytes_up)),
            KeyValue::new(SESSION_BYTES_DOWN, int(s.bytes_down)),
            KeyValue::new(HTTP_RESPONSE_STATUS_CODE, 101),
        ];
        let split = &s.modalities;
        for (key, v) in [
            (SESSION_CACHE_READ, s.cached_input_tokens),
            (SESSION_TEXT_INPUT, split.input_text),
            (SESSION_AUDIO_INPUT, split.input_audio),
            (SESSION_CACHE_READ_TEXT, split.cached_text),
            (SESSION_CACHE_READ_AUDIO, split.cached_audio),
            (SESSION_TEXT_OUTPUT, split.output_text),
            (SESSION_AUDIO_OUTPUT, split.output_audio),
        ] {
            if let Some(v) = v {
                a.push(KeyValue::new(key, int(v)));
            }
        }
        if let Some(c) = s.close_client {
            a.push(KeyValue::new(SESSION_CLOSE_CODE_CLIENT, i64::from(c)));
        }
        if let Some(c) = s.close_upstream {
            a.push(KeyValue::new(SESSION_CLOSE_CODE_UPSTREAM, i64::from(c)));
        }
        if let Some(why) = &s.unmetered {
            a.push(KeyValue::new(SESSION_UNMETERED, why.clone()));
        }
        if let Some(model) = &s.model {
            a.push(KeyValue::new(GEN_AI_RESPONSE_MODEL, model.clone()));
        }
        span.set_attributes(a);
        span.end_with_timestamp(facts.start_wall + s.duration);
    }
}
