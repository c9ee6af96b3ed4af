//! The span pipeline: finished `SpanRecord`s in (one short lock per
//! record on the request thread); batches handed to a `RecordExporter` on
//! tokentap's own export thread out: the OTLP exporter (HTTP and gRPC)
//! encodes records directly (`otlp_wire`), any other SDK `SpanExporter`
//! (the in-memory one of tests) gets their `SpanData` (`SdkSpans`).
//! Replaces the SDK's
//! `BatchSpanProcessor`, with the same knobs: a queue of
//! `telemetry.span_queue_size` records (more are dropped and counted),
//! batches of `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512), an export at least
//! every `OTEL_BSP_SCHEDULE_DELAY` ms (5000) and whenever a full batch is
//! waiting, and `flush`/`shutdown` that export everything queued.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::drops::DropCounts;
use super::span_record::SpanRecord;

const BATCH_SIZE_DEFAULT: usize = 512;
const SCHEDULE_DELAY_DEFAULT: Duration = Duration::from_millis(5_000);

/// Queue bounds and export schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSettings {
    /// Records waiting; more are dropped.
    pub(crate) queue: usize,
    /// Records per export.
    pub(crate) batch: usize,
    /// Longest time between exports.
    pub(crate) delay: Duration,
}

impl BatchSettings {
    /// `queue` records, batch size and delay from `OTEL_BSP_*` as
    /// `BatchConfigBuilder::default()` reads them (unparsable values keep
    /// the default; the batch is at most the queue).
    pub(crate) fn from_env(queue: usize) -> BatchSettings {
        let var = |name: &str| std::env::var(name).ok();
        BatchSettings::from_vars(
            queue,
            var("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").as_deref(),
            var("OTEL_BSP_SCHEDULE_DELAY").as_deref(),
        )
    }

    fn from_vars(queue: usize, batch: Option<&str>, delay: Option<&str>) -> BatchSettings {
        let queue = queue.max(1);
        let batch = batch
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(BATCH_SIZE_DEFAULT);
        let delay = delay
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(SCHEDULE_DELAY_DEFAULT, Duration::from_millis);
        BatchSettings {
            queue,
            batch: batch.clamp(1, queue),
            delay,
        }
    }
}

/// Where the export thread sends each batch.
pub(crate) trait RecordExporter: Send + 'static {
    /// Export one batch; returns when it is sent or has failed.
    fn export(&mut self, records: Vec<SpanRecord>) -> OTelSdkResult;
    fn shutdown(&mut self) -> OTelSdkResult;
}

/// An SDK `SpanExporter` behind the pipeline: each record becomes its
/// `SpanData` on the export thread.
#[derive(Debug)]
pub(crate) struct SdkSpans<E> {
    exporter: E,
    scope: InstrumentationScope,
    max_attributes: usize,
}

impl<E: SpanExporter> SdkSpans<E> {
    /// `exporter`, for spans of `resource` and `scope` with at most
    /// `max_attributes` attributes each.
    pub(crate) fn new(
        mut exporter: E,
        resource: &Resource,
        scope: InstrumentationScope,
        max_attributes: usize,
    ) -> SdkSpans<E> {
        exporter.set_resource(resource);
        SdkSpans {
            exporter,
            scope,
            max_attributes,
        }
    }
}

impl<E: SpanExporter + 'static> RecordExporter for SdkSpans<E> {
    fn export(&mut self, records: Vec<SpanRecord>) -> OTelSdkResult {
        let batch: Vec<SpanData> = records
            .iter()
            .map(|r| r.span_data(&self.scope, self.max_attributes))
            .collect();
        drop(records);
        futures_executor::block_on(self.exporter.export(batch))
    }

    fn shutdown(&mut self) -> OTelSdkResult {
        self.exporter.shutdown()
    }
}

/// What the request threads and the export thread share.
#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the export thread: a full batch, a flush, shutdown.
    wake: Condvar,
    /// Wakes `flush`/`shutdown` callers when their export is done.
    done: Condvar,
    settings: BatchSettings,
}

#[derive(Debug, Default)]
struct State {
    /// Records waiting, oldest first. A batch leaves the queue when its
    /// export starts (as in the batch processor), so a stuck export holds
    /// one batch and the queue fills behind it.
    records: Vec<SpanRecord>,
    /// Flushes asked for and done (a flush waits for `done >= asked`).
    flush_asked: u64,
    flush_done: u64,
    /// `shutdown` was called: no more records, the thread exports and exits.
    shutdown: bool,
    /// The thread has exited.
    exited: bool,
}

/// The span pipeline. Dropping it shuts it down (bounded wait).
#[derive(Debug)]
pub(crate) struct SpanPipeline {
    shared: Arc<Shared>,
    drops: Arc<DropCounts>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl SpanPipeline {
    /// Start the export thread for `exporter`.
    pub(crate) fn start(
        exporter: impl RecordExporter,
        drops: Arc<DropCounts>,
        settings: BatchSettings,
    ) -> SpanPipeline {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            settings,
        });
        let worker = Worker {
            shared: shared.clone(),
            drops: drops.clone(),
            exporter,
        };
        let thread = thread::Builder::new()
            .name("tokentap-spans".into())
            .spawn(move || worker.run())
            .map_err(|e| tracing::warn!(error = %e, "span export thread did not start"))
            .ok();
        if thread.is_none() {
            // Nothing would ever drain the queue: refuse records.
            if let Ok(mut s) = shared.state.lock() {
                s.shutdown = true;
                s.exited = true;
            }
        }
        SpanPipeline {
            shared,
            drops,
            thread: Mutex::new(thread),
        }
    }

    /// Queue one finished span; a full queue drops it (counted). Never waits
    /// beyond the short lock.
    pub(crate) fn push(&self, record: SpanRecord) {
        let Ok(mut s) = self.shared.state.lock() else {
            return;
        };
        if s.shutdown {
            return;
        }
        if s.records.len() >= self.shared.settings.queue {
            drop(s);
            self.drops.add_spans(1);
            return;
        }
        s.records.push(record);
        // Wake the thread only when a batch is complete: a notify is a
        // system call.
        let full = s.records.len() == self.shared.settings.batch;
        drop(s);
        if full {
            self.shared.wake.notify_one();
        }
    }

    /// Export what is queued now; waits at most `timeout`.
    pub(crate) fn flush(&self, timeout: Duration) {
        let Ok(mut s) = self.shared.state.lock() else {
            return;
        };
        if s.shutdown {
            return;
        }
        s.flush_asked += 1;
        let asked = s.flush_asked;
        self.shared.wake.notify_one();
        let _ = self
            .shared
            .done
            .wait_timeout_while(s, timeout, |s| s.flush_done < asked && !s.exited);
    }

    /// Export what is queued, shut the exporter down and stop the thread;
    /// waits at most `timeout`. Later calls do nothing.
    pub(crate) fn shutdown(&self, timeout: Duration) {
        let Ok(mut s) = self.shared.state.lock() else {
            return;
        };
        if s.shutdown {
            return;
        }
        s.shutdown = true;
        self.shared.wake.notify_one();
        let (s, _) = self
            .shared
            .done
            .wait_timeout_while(s, timeout, |s| !s.exited)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let exited = s.exited;
        drop(s);
        if exited
            && let Ok(mut t) = self.thread.lock()
            && let Some(t) = t.take()
        {
            let _ = t.join();
        }
    }
}

impl Drop for SpanPipeline {
    fn drop(&mut self) {
        self.shutdown(super::SHUTDOWN_TIMEOUT);
    }
}

/// The export thread's side.
struct Worker<E> {
    shared: Arc<Shared>,
    drops: Arc<DropCounts>,
    exporter: E,
}

impl<E: RecordExporter> Worker<E> {
    fn run(mut self) {
        // The exporter's own work is never traced.
        let _suppress = Context::enter_telemetry_suppressed_scope();
        let settings = self.shared.settings;
        #[allow(
            clippy::disallowed_methods,
            reason = "schedules exports; not a measurement"
        )]
        let now = Instant::now;
        let mut last = now();
        loop {
            let Ok(mut s) = self.shared.state.lock() else {
                return;
            };
            loop {
                if s.shutdown || s.flush_asked > s.flush_done || s.records.len() >= settings.batch {
                    break;
                }
                let Some(left) = settings.delay.checked_sub(last.elapsed()) else {
                    break;
                };
                s = match self.shared.wake.wait_timeout(s, left) {
                    Ok((s, _)) => s,
                    Err(_) => return,
                };
            }
            let (asked, stop) = (s.flush_asked, s.shutdown);
            // Everything queued now goes out, a batch at a time.
            let mut left = s.records.len();
            drop(s);
            while left > 0 {
                let Some(batch) = self.take(left) else {
                    break;
                };
                left -= batch.len();
                self.export(batch);
            }
            last = now();
            let Ok(mut s) = self.shared.state.lock() else {
                return;
            };
            s.flush_done = s.flush_done.max(asked);
            if stop {
                drop(s);
                let _ = self.exporter.shutdown();
                if let Ok(mut s) = self.shared.state.lock() {
                    s.exited = true;
                    // Records that came in after the last take are lost,
                    // as after an SDK shutdown.
                    s.records.clear();
                }
                self.shared.done.notify_all();
                return;
            }
            drop(s);
            self.shared.done.notify_all();
        }
    }

    /// Up to one batch (at most `left`) off the front of the queue.
    fn take(&self, left: usize) -> Option<Vec<SpanRecord>> {
        let mut s: MutexGuard<'_, State> = self.shared.state.lock().ok()?;
        let n = left.min(self.shared.settings.batch).min(s.records.len());
        (n > 0).then(|| s.records.drain(..n).collect())
    }

    fn export(&mut self, records: Vec<SpanRecord>) {
        let n = records.len();
        match self.exporter.export(records) {
            Ok(()) => self.drops.export_ok(),
            Err(e) => {
                self.drops.add_spans(n as u64);
                self.drops.export_failed("traces", &e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use opentelemetry_sdk::trace::InMemorySpanExporter;

    use super::super::span_record::{SpanParts, SpanStart};
    use super::*;

    fn record(i: u64) -> SpanRecord {
        SpanRecord::WsSession(Box::new(SpanParts {
            start: SpanStart {
                context: opentelemetry::trace::SpanContext::empty_context(),
                parent: opentelemetry::trace::SpanId::INVALID,
                parent_remote: false,
                head: Default::default(),
            },
            name: format!("s{i}"),
            start_time: std::time::UNIX_EPOCH,
            end_time: std::time::UNIX_EPOCH,
            attributes: Vec::new(),
            error: None,
            kept: super::super::sampling::Kept::always(super::super::sampling::Reason::All),
        }))
    }

    fn sdk<E: SpanExporter>(e: E) -> SdkSpans<E> {
        let scope = InstrumentationScope::builder("test").build();
        SdkSpans::new(e, &Resource::builder_empty().build(), scope, 128)
    }

    /// Blocks every export until the test drops the sender.
    #[derive(Debug)]
    struct StuckExporter(Mutex<mpsc::Receiver<()>>);

    impl SpanExporter for StuckExporter {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.0.lock().map(|rx| rx.recv());
            Ok(())
        }
    }

    /// Counts what it exports, then hands it on.
    #[derive(Debug)]
    struct Counting(InMemorySpanExporter, Arc<std::sync::atomic::AtomicUsize>);

    impl SpanExporter for Counting {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            assert!(batch.len() <= 7, "batches of at most the batch size");
            self.1
                .fetch_add(batch.len(), std::sync::atomic::Ordering::Relaxed);
            self.0.export(batch).await
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.0.shutdown_with_timeout(timeout)
        }
    }

    fn settings(queue: usize, batch: usize) -> BatchSettings {
        BatchSettings {
            queue,
            batch,
            delay: Duration::from_secs(3600),
        }
    }

    #[test]
    fn full_queue_drops_are_counted() {
        let (release, rx) = mpsc::channel();
        let drops = Arc::new(DropCounts::default());
        let cap = 2;
        let p = SpanPipeline::start(
            sdk(StuckExporter(Mutex::new(rx))),
            drops.clone(),
            settings(cap, cap),
        );
        let total = 20;
        for i in 0..total {
            p.push(record(i));
        }
        // At most `cap` records wait in the queue and `cap` sit in the stuck export.
        assert!(
            drops.spans() >= total - 2 * cap as u64,
            "expected at least {} drops, got {}",
            total - 2 * cap as u64,
            drops.spans()
        );
        drop(release);
        p.shutdown(Duration::from_secs(5));
    }

    #[test]
    fn flush_and_shutdown_export_everything_queued_in_batches() {
        let spans = InMemorySpanExporter::default();
        let counted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let drops = Arc::new(DropCounts::default());
        let p = SpanPipeline::start(
            sdk(Counting(spans.clone(), counted.clone())),
            drops.clone(),
            settings(100, 7),
        );
        for i in 0..30 {
            p.push(record(i));
        }
        p.flush(Duration::from_secs(5));
        let got = spans.get_finished_spans().expect("spans");
        assert_eq!(got.len(), 30, "flush exports every queued record");
        let names: Vec<_> = got.iter().map(|s| s.name.to_string()).collect();
        let want: Vec<_> = (0..30).map(|i| format!("s{i}")).collect();
        assert_eq!(names, want, "in queue order");
        spans.reset();
        for i in 30..45 {
            p.push(record(i));
        }
        // The in-memory exporter forgets its spans when shut down: count
        // them on the way in.
        p.shutdown(Duration::from_secs(5));
        assert_eq!(counted.load(std::sync::atomic::Ordering::Relaxed), 45);
        p.push(record(99));
        p.flush(Duration::from_secs(1));
        assert_eq!(
            drops.spans(),
            0,
            "nothing dropped; late records are ignored"
        );
    }

    #[test]
    fn batch_settings_read_as_the_sdk_reads_them() {
        let d = BatchSettings::from_vars(2048, None, None);
        assert_eq!((d.batch, d.delay), (512, Duration::from_secs(5)));
        let s = BatchSettings::from_vars(100, Some("300"), Some("250"));
        assert_eq!((s.batch, s.delay), (100, Duration::from_millis(250)));
        let bad = BatchSettings::from_vars(2048, Some("x"), Some("-1"));
        assert_eq!((bad.batch, bad.delay), (512, Duration::from_secs(5)));
    }
}
