//! Logs: a finished `Measurement` in, one structured access-log line
//! (target `tokentap::access`) out; plus the process's subscriber setup.
//! Never headers or bodies.

use std::time::Duration;

use opentelemetry::trace::Span as _;

use crate::config::LogFormat;
use crate::meter::Measurement;

/// One structured line per request. Never headers or bodies.
pub fn access_log(m: &Measurement, span: &opentelemetry_sdk::trace::Span) {
    let sc = span.span_context();
    tracing::info!(
        target: "tokentap::access",
        route = &*m.request.route,
        status = m.status,
        outcome = m.outcome.as_str(),
        model = m.request.request_model.as_deref(),
        response_model = m.response_model.as_deref(),
        tenant = m.request.tenant.as_deref(),
        stream = m.request.stream,
        ttft_ms = m.time_to_first_token.map(millis),
        tpot_ms = m.time_per_output_token().map(millis),
        decode_tps = m.decode_tokens_per_second(),
        tokens_in = m.usage.input,
        tokens_out = m.output_tokens.or(m.usage.output),
        estimated = m.estimated(),
        max_stall_ms = m.max_gap.map(millis),
        duration_ms = millis(m.duration),
        error = m.error_type.as_deref(),
        trace_id = sc.is_valid().then(|| sc.trace_id().to_string()).as_deref(),
        "request"
    );
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Keeps the log writer thread alive; dropping it flushes what is queued.
pub type LogGuard = tracing_appender::non_blocking::WorkerGuard;

/// Lines queued for the writer thread before new ones are dropped.
const LOG_QUEUE_LINES: usize = 65_536;

/// Install the process's `tracing` subscriber: text or JSON lines on stdout,
/// filtered by `RUST_LOG` (default `info`). Lines go through a bounded queue
/// to a writer thread, so a slow or blocked stdout drops log lines instead
/// of stalling the streams whose access-log line is being written.
/// Keep the guard until exit. A second call does nothing and returns `None`.
pub fn init_logging(format: LogFormat) -> Option<LogGuard> {
    use tracing_subscriber::EnvFilter;
    // The OpenTelemetry SDK and exporter log each failed export (a WARN
    // and an ERROR every interval while a collector is down); tokentap
    // reports export failures itself, rate-limited (`export.rs`). Their
    // lines show only when RUST_LOG names them.
    let wanted = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let directives = if wanted.contains("opentelemetry") {
        wanted
    } else {
        format!("{wanted},opentelemetry=off")
    };
    let filter = EnvFilter::builder().parse_lossy(directives);
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .thread_name("tokentap-log")
        .finish(std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.ok().map(|()| guard)
}
