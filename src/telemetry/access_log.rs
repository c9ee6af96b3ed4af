//! The access log: a finished `Measurement` in, one structured line
//! (target `tokentap::access`) out. Never headers or bodies.

use std::time::Duration;

use crate::meter::Measurement;

/// One structured line per request. Never headers or bodies.
/// `span_exported`: the request's span was exported (sampling kept it), so
/// `trace_id` leads to a trace in the backend.
pub(super) fn access_log(
    m: &Measurement,
    sc: &opentelemetry::trace::SpanContext,
    span_exported: bool,
) {
    tracing::info!(
        target: "tokentap::access",
        route = &*m.request.route,
        status = m.status,
        outcome = m.outcome.as_str(),
        model = m.request.request_model.as_deref(),
        response_model = m.response_model.as_deref(),
        tenant = m.request.tenant.as_deref(),
        // Already bounded as on the span (`sessions.max_id_length`, printable ASCII).
        session_id = m.request.session.as_deref(),
        stream = m.request.stream,
        ttft_ms = m.time_to_first_token.map(millis),
        tpot_ms = m.time_per_output_token().map(millis),
        decode_tps = m.decode_tokens_per_second().map(round3),
        tokens_in = m.usage.input,
        tokens_out = m.output_tokens.or(m.usage.output),
        estimated = m.estimated(),
        max_stall_ms = m.max_gap.map(millis),
        duration_ms = millis(m.duration),
        error = m.error_type.as_deref(),
        cause = m.error_cause.as_deref(),
        trace_id = sc.is_valid().then(|| sc.trace_id().to_string()).as_deref(),
        span_exported,
        "request"
    );
}

/// The access-log line of a request that matched no route.
pub(super) fn no_route_log(method: &http::Method, path: &str) {
    tracing::info!(
        target: "tokentap::access",
        status = 404,
        outcome = crate::attrs::OUTCOME_NO_ROUTE,
        method = method.as_str(),
        path,
        "request"
    );
}

/// Milliseconds to the microsecond: what the clock readings are worth,
/// without float noise (`256.14899099999997`).
fn millis(d: Duration) -> f64 {
    round3(d.as_secs_f64() * 1000.0)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_numbers_are_rounded() {
        assert_eq!(millis(Duration::from_nanos(256_148_990)), 256.149);
        assert_eq!(round3(41.123_456_7), 41.123);
    }
}
