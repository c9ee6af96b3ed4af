//! The log lines' queue to the writer thread: bounded by a count of queued
//! lines, not by a preallocated ring. `tracing_appender`'s bounded channel
//! (a crossbeam array) writes every slot's stamp when it is built, so its
//! 65,536 lines were 2 MiB resident from start-up whether or not a line was
//! ever logged; here memory follows the lines actually waiting, and the
//! behaviour is the same: a line that finds the limit reached is dropped,
//! the writer thread writes lines in order and flushes when the queue runs
//! empty, and dropping the guard waits (at most a second) until every line
//! queued before it is written and flushed.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

enum Msg {
    Line(Vec<u8>),
    /// Flush, answer on the sender, and stop.
    Shutdown(Sender<()>),
}

/// Where log lines are written: a handle on the queue (cheap to clone).
#[derive(Clone)]
pub(super) struct QueueWriter {
    tx: Sender<Msg>,
    /// Lines sent and not yet taken by the writer thread.
    queued: Arc<AtomicUsize>,
    limit: usize,
}

/// Keeps the writer thread alive; dropping it writes and flushes what is
/// queued (waiting at most a second).
pub struct QueueGuard {
    tx: Sender<Msg>,
}

/// Start the writer thread `name`, writing to `out`; at most `limit` lines
/// wait, further lines are dropped until it catches up.
pub(super) fn start<W: Write + Send + 'static>(
    out: W,
    limit: usize,
    name: &str,
) -> io::Result<(QueueWriter, QueueGuard)> {
    let (tx, rx) = channel();
    let queued = Arc::new(AtomicUsize::new(0));
    let taken = queued.clone();
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || work(out, &rx, &taken))?;
    let writer = QueueWriter {
        tx: tx.clone(),
        queued,
        limit,
    };
    Ok((writer, QueueGuard { tx }))
}

/// Write lines as they come, flushing whenever the queue runs empty.
fn work<W: Write>(mut out: W, rx: &Receiver<Msg>, queued: &AtomicUsize) {
    let take = |msg: Msg, out: &mut W| match msg {
        Msg::Line(line) => {
            queued.fetch_sub(1, Ordering::AcqRel);
            // A failed write loses the line, as it would writing directly.
            let _ = out.write_all(&line);
            None
        }
        Msg::Shutdown(done) => Some(done),
    };
    while let Ok(msg) = rx.recv() {
        let mut stop = take(msg, &mut out);
        while stop.is_none() {
            match rx.try_recv() {
                Ok(msg) => stop = take(msg, &mut out),
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        let _ = out.flush();
        if let Some(done) = stop {
            let _ = done.send(());
            return;
        }
    }
    let _ = out.flush();
}

impl Write for QueueWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let limit = self.limit;
        let room = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        if room && self.tx.send(Msg::Line(buf.to_vec())).is_err() {
            // The writer thread is gone: the line is lost, as when full.
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for QueueWriter {
    type Writer = QueueWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        let (done, wait) = channel();
        if self.tx.send(Msg::Shutdown(done)).is_ok() {
            let _ = wait.recv_timeout(Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A sink that blocks every write until `gate` is released.
    #[derive(Clone)]
    struct Gated {
        out: Arc<Mutex<Vec<u8>>>,
        gate: Arc<Mutex<()>>,
        flushes: Arc<AtomicUsize>,
    }

    impl Write for Gated {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _open = self.gate.lock().expect("gate");
            self.out.lock().expect("out").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.flushes.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    fn gated() -> Gated {
        Gated {
            out: Arc::default(),
            gate: Arc::default(),
            flushes: Arc::default(),
        }
    }

    #[test]
    fn lines_past_the_limit_are_dropped_and_the_rest_written_in_order() {
        let sink = gated();
        let closed = sink.gate.lock().expect("gate");
        let (mut w, guard) = start(sink.clone(), 3, "test-log").expect("start");
        // The writer thread takes the first line and blocks writing it.
        w.write_all(b"0\n").expect("write");
        while w.queued.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
        for i in 1..=5 {
            w.write_all(format!("{i}\n").as_bytes()).expect("write");
        }
        assert_eq!(w.queued.load(Ordering::Acquire), 3, "the limit holds");
        drop(closed);
        drop(guard);
        assert_eq!(&*sink.out.lock().expect("out"), b"0\n1\n2\n3\n");
        assert!(sink.flushes.load(Ordering::Relaxed) >= 1, "flushed");
        // Room again once written; after the guard is gone a line is lost
        // without an error or a wait (the writer thread may still be on its
        // way out, so whether it was counted as queued is not checked).
        assert_eq!(w.queued.load(Ordering::Acquire), 0);
        w.write_all(b"late\n")
            .expect("write after shutdown is harmless");
        assert_eq!(&*sink.out.lock().expect("out"), b"0\n1\n2\n3\n");
    }

    #[test]
    fn dropping_the_guard_writes_what_was_queued() {
        let sink = gated();
        let (writer, guard) = start(sink.clone(), 1024, "test-log").expect("start");
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let mut w = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        w.write_all(format!("{t}:{i}\n").as_bytes()).expect("write");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("join");
        }
        drop(guard);
        let out = String::from_utf8(sink.out.lock().expect("out").clone()).expect("utf8");
        assert_eq!(
            out.lines().count(),
            400,
            "every line written before the guard returned"
        );
        for t in 0..4 {
            let mine: Vec<&str> = out
                .lines()
                .filter(|l| l.starts_with(&format!("{t}:")))
                .collect();
            let want: Vec<String> = (0..100).map(|i| format!("{t}:{i}")).collect();
            assert_eq!(mine, want, "each writer's lines in order");
        }
    }
}
