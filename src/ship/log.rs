//! The process's log subscriber: every line tokentap writes (access log,
//! diagnostics, start-up banners, fatal errors) in; text or JSON on stderr
//! out, through a bounded queue to one writer thread (`log_queue`).

use crate::config::LogFormat;

/// Target of the start-up banners and of fatal errors: shown whatever
/// `RUST_LOG` says (unless it names this target itself), so the addresses
/// tokentap listens on, and why it stopped, are never filtered away.
pub const STARTUP_TARGET: &str = "tokentap::startup";

/// Report the error that ends the process: a log record when the
/// subscriber is installed (so JSON stays JSON), else a plain line.
pub fn fatal(message: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::error!(target: STARTUP_TARGET, "tokentap: {message}");
    } else {
        eprintln!("tokentap: {message}");
    }
}

/// Keeps the log writer thread alive; dropping it flushes what is queued.
pub type LogGuard = super::log_queue::QueueGuard;

/// Lines queued for the writer thread before new ones are dropped.
const LOG_QUEUE_LINES: usize = 65_536;

/// Install the process's `tracing` subscriber: every line tokentap writes
/// (access log, diagnostics, start-up banners, fatal errors), text or JSON,
/// on stderr, filtered by `RUST_LOG` (default `info`). Lines go through a
/// bounded queue to one writer thread, so a slow or blocked stderr drops
/// log lines instead of stalling the streams whose access-log line is being
/// written, and lines never interleave. Keep the guard until exit. A second
/// call (or one that cannot start the writer thread) installs nothing and
/// returns `None`.
pub fn init_logging(format: LogFormat) -> Option<LogGuard> {
    let (filter, bad) = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let (writer, guard) =
        match super::log_queue::start(std::io::stderr(), LOG_QUEUE_LINES, "tokentap-log") {
            Ok(started) => started,
            Err(e) => {
                eprintln!("tokentap: cannot start the log writer thread: {e}");
                return None;
            }
        };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .map_event_format(JsonLists)
            .try_init(),
    };
    let guard = installed.ok().map(|()| guard)?;
    if let Some(e) = bad {
        tracing::warn!(target: STARTUP_TARGET, error = %e, "RUST_LOG ignored; logging at info");
    }
    Some(guard)
}

/// Start-up fields whose value is a list, recorded as its JSON text
/// (`routes = %json`): the JSON log writes them as arrays, not strings.
const LIST_FIELDS: [&str; 1] = ["routes"];

/// The JSON event format, with the [`LIST_FIELDS`] of start-up lines
/// written as JSON arrays. Other lines (the access log) pass untouched.
struct JsonLists<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for JsonLists<F>
where
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let has_list = event.metadata().target() == STARTUP_TARGET
            && event.fields().any(|f| LIST_FIELDS.contains(&f.name()));
        if !has_list {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        writer.write_str(&expand_lists(&line))
    }
}

/// `line` (one JSON object) with each [`LIST_FIELDS`] string that holds a
/// JSON array replaced by that array; anything else unchanged.
fn expand_lists(line: &str) -> String {
    use serde_json::Value;
    let Ok(Value::Object(mut object)) = serde_json::from_str::<Value>(line.trim_end()) else {
        return line.to_owned();
    };
    for field in LIST_FIELDS {
        let list = object
            .get(field)
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str::<Value>(s).ok())
            .filter(Value::is_array);
        if let Some(list) = list {
            object.insert(field.to_owned(), list);
        }
    }
    format!("{}\n", Value::Object(object))
}

/// The filter for `RUST_LOG` (`None` or blank = `info`), with
/// [`STARTUP_TARGET`] at `info` unless `RUST_LOG` names it; plus the parse
/// error when `RUST_LOG` was invalid (then `info`).
pub fn log_filter(rust_log: Option<&str>) -> (tracing_subscriber::EnvFilter, Option<String>) {
    use tracing_subscriber::EnvFilter;
    let spec = rust_log.map(str::trim).filter(|s| !s.is_empty());
    let (filter, bad) = match spec.map(EnvFilter::try_new) {
        None => (EnvFilter::new("info"), None),
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (EnvFilter::new("info"), Some(e.to_string())),
    };
    // The OpenTelemetry SDK and exporter log each failed export (a WARN
    // and an ERROR every interval while a collector is down); tokentap
    // reports export failures itself, rate-limited (`export.rs`). Their
    // lines show only when RUST_LOG names them.
    let filter = match "opentelemetry=off".parse() {
        Ok(quiet) if !spec.is_some_and(|s| s.contains("opentelemetry")) => {
            filter.add_directive(quiet)
        }
        _ => filter,
    };
    if spec.is_some_and(|s| s.contains(STARTUP_TARGET)) {
        return (filter, bad);
    }
    match format!("{STARTUP_TARGET}=info").parse() {
        Ok(directive) => (filter.add_directive(directive), bad),
        Err(_) => (filter, bad),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_fields_become_arrays_and_other_lines_stay() {
        let line = "{\"routes\":\"[\\\"a / -> http://x\\\"]\",\"message\":\"m\"}\n";
        let out: serde_json::Value =
            serde_json::from_str(&super::expand_lists(line)).expect("json");
        assert_eq!(
            out["routes"],
            serde_json::json!(["a / -> http://x"]),
            "{out}"
        );
        assert_eq!(out["message"], "m");
        let plain = "{\"routes\":\"not a list\"}\n";
        assert_eq!(
            super::expand_lists(plain),
            plain,
            "a string that is no array stays"
        );
        assert_eq!(super::expand_lists("text line\n"), "text line\n");
    }

    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `RUST_LOG=rust_log` lets through of: one access line, one
    /// diagnostic, one start-up line.
    fn shown(rust_log: Option<&str>) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let (filter, bad) = log_filter(rust_log);
        assert_eq!(bad, None, "{rust_log:?} parses");
        let sub = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || out.clone())
            .finish();
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "tokentap::access", "ACCESS");
            tracing::info!(target: "tokentap::server", "DIAGNOSTIC");
            tracing::info!(target: STARTUP_TARGET, "STARTUP");
        });
        String::from_utf8(buf.0.lock().expect("lock").clone()).expect("utf-8")
    }

    /// The forms docs/METRICS.md ("Access log") documents.
    #[test]
    fn documented_rust_log_forms() {
        let all = shown(None);
        assert!(
            ["ACCESS", "DIAGNOSTIC", "STARTUP"]
                .iter()
                .all(|w| all.contains(w)),
            "{all}"
        );
        let no_access = shown(Some("info,tokentap::access=off"));
        assert!(!no_access.contains("ACCESS"), "{no_access}");
        assert!(
            no_access.contains("DIAGNOSTIC") && no_access.contains("STARTUP"),
            "{no_access}"
        );
        let bare = shown(Some("tokentap::access=off"));
        assert!(
            !bare.contains("ACCESS") && !bare.contains("DIAGNOSTIC"),
            "{bare}"
        );
        assert!(
            bare.contains("STARTUP"),
            "start-up lines survive any filter: {bare}"
        );
        let warn = shown(Some("warn"));
        assert!(
            !warn.contains("DIAGNOSTIC") && warn.contains("STARTUP"),
            "{warn}"
        );
        let (_, bad) = log_filter(Some("tokentap=loud"));
        assert!(bad.is_some(), "an invalid RUST_LOG is reported");
    }
}
