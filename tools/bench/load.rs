//! The load client: a target address and a request in, a fixed number of
//! HTTP/1.1 keep-alive connections driven for a fixed time, client-side
//! latency figures (TTFT, inter-chunk gaps, total time) out.
//!
//! One tokio task per connection, one request at a time on it. Only
//! requests that *complete* inside the measurement window count; a request
//! still running when the window closes is dropped (and so cancelled).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use memchr::memmem;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use crate::hist::Hist;

/// Which API shape the request uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Api {
    /// OpenAI `/v1/chat/completions`.
    Chat,
    /// Anthropic `/v1/messages`.
    Messages,
}

impl Api {
    /// The request path below a route prefix.
    pub(crate) fn path(self) -> &'static str {
        match self {
            Api::Chat => "/v1/chat/completions",
            Api::Messages => "/v1/messages",
        }
    }

    /// The request body.
    pub(crate) fn body(self, stream: bool, max_tokens: Option<u32>) -> Bytes {
        let max = max_tokens.map_or(String::new(), |n| format!(r#","max_tokens":{n}"#));
        let prompt = r#""messages":[{"role":"user","content":"Write a short story about a reverse proxy that counts tokens."}]"#;
        let s = match (self, stream) {
            (Api::Chat, true) => format!(
                r#"{{"model":"gpt-4o-mini","stream":true,"stream_options":{{"include_usage":true}}{max},{prompt}}}"#
            ),
            (Api::Chat, false) => format!(r#"{{"model":"gpt-4o-mini"{max},{prompt}}}"#),
            (Api::Messages, s) => {
                format!(r#"{{"model":"claude-sonnet-4-20250514","stream":{s}{max},{prompt}}}"#)
            }
        };
        Bytes::from(s)
    }
}

/// What to send, to whom, how hard and for how long.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    pub addr: SocketAddr,
    pub path: String,
    pub body: Bytes,
    pub stream: bool,
    pub concurrency: usize,
    pub warmup: Duration,
    pub duration: Duration,
    /// Connections being opened at once (keeps accept queues from overflowing).
    pub ramp: usize,
    /// Each request carries an agent session header
    /// (`x-claude-code-session-id`, one session per connection).
    pub session: bool,
}

/// One run's client-side figures. Times are milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct Report {
    pub concurrency: usize,
    pub duration_s: f64,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    pub response_bytes: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub total_p50_ms: Option<f64>,
    pub total_p99_ms: Option<f64>,
    pub gap_p50_ms: Option<f64>,
    pub gap_p99_ms: Option<f64>,
    pub gap_max_ms: Option<f64>,
    pub first_error: Option<String>,
}

/// Samples gathered by all connections.
#[derive(Default)]
struct Totals {
    ttft: Hist,
    total: Hist,
    gaps: Hist,
    requests: u64,
    errors: u64,
    bytes: u64,
    first_error: Option<String>,
}

/// One connection's samples, flushed into `Totals` in batches so that
/// 10,000 connections do not each carry a histogram.
#[derive(Default)]
struct Local {
    ttft: Vec<u64>,
    total: Vec<u64>,
    gaps: Vec<u64>,
    requests: u64,
    errors: u64,
    bytes: u64,
    first_error: Option<String>,
}

impl Local {
    fn flush(&mut self, totals: &Mutex<Totals>) {
        let mut t = totals.lock().expect("totals lock");
        for v in self.ttft.drain(..) {
            t.ttft.record(v);
        }
        for v in self.total.drain(..) {
            t.total.record(v);
        }
        for v in self.gaps.drain(..) {
            t.gaps.record(v);
        }
        t.requests += std::mem::take(&mut self.requests);
        t.errors += std::mem::take(&mut self.errors);
        t.bytes += std::mem::take(&mut self.bytes);
        if t.first_error.is_none() {
            t.first_error = self.first_error.take();
        }
    }

    fn error(&mut self, e: String) {
        self.errors += 1;
        self.first_error.get_or_insert(e);
    }

    fn full(&self) -> bool {
        self.ttft.len() >= 256 || self.gaps.len() >= 4096
    }
}

/// The measurement window.
#[derive(Clone, Copy)]
struct Window {
    start: Instant,
    end: Instant,
}

impl Window {
    fn contains(&self, t: Instant) -> bool {
        t >= self.start && t <= self.end
    }
}

/// Run `spec`; `on_window` is told the window's start and end as soon as
/// they are known (the suite reads process CPU time at those instants).
pub(crate) async fn run(spec: Spec, on_window: impl FnOnce(Instant, Instant)) -> Report {
    let start = Instant::now() + spec.warmup;
    let window = Window {
        start,
        end: start + spec.duration,
    };
    on_window(window.start, window.end);
    let spec = Arc::new(spec);
    let totals = Arc::new(Mutex::new(Totals::default()));
    let ramp = Arc::new(Semaphore::new(spec.ramp.max(1)));
    let mut tasks = Vec::with_capacity(spec.concurrency);
    for id in 0..spec.concurrency {
        let (spec, totals, ramp) = (spec.clone(), totals.clone(), ramp.clone());
        tasks.push(tokio::spawn(async move {
            let mut local = Local::default();
            connection(id, &spec, window, &ramp, &totals, &mut local).await;
            local.flush(&totals);
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let t = std::mem::take(&mut *totals.lock().expect("totals lock"));
    let secs = spec.duration.as_secs_f64();
    let ms = |h: &Hist, q: f64| h.quantile(q).map(|ns| ns as f64 / 1e6);
    Report {
        concurrency: spec.concurrency,
        duration_s: secs,
        requests: t.requests,
        errors: t.errors,
        rps: t.requests as f64 / secs,
        response_bytes: t.bytes,
        ttft_p50_ms: ms(&t.ttft, 0.5),
        ttft_p90_ms: ms(&t.ttft, 0.9),
        ttft_p99_ms: ms(&t.ttft, 0.99),
        total_p50_ms: ms(&t.total, 0.5),
        total_p99_ms: ms(&t.total, 0.99),
        gap_p50_ms: ms(&t.gaps, 0.5),
        gap_p99_ms: ms(&t.gaps, 0.99),
        gap_max_ms: t.gaps.max().map(|ns| ns as f64 / 1e6),
        first_error: t.first_error,
    }
}

pub(crate) type Sender = http1::SendRequest<Full<Bytes>>;

/// Open a keep-alive HTTP/1.1 connection.
pub(crate) async fn connect(addr: SocketAddr) -> Result<Sender, String> {
    let tcp = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

fn request(spec: &Spec, id: usize) -> Request<Full<Bytes>> {
    let mut req = Request::post(spec.path.as_str())
        .header(header::HOST, spec.addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::AUTHORIZATION,
            format!("Bearer sk-bench-{:04}", id % 16),
        );
    if spec.session {
        req = req.header("x-claude-code-session-id", format!("bench-session-{id:04}"));
    }
    req.body(Full::new(spec.body.clone()))
        .expect("a valid request")
}

/// Drive one connection until the window ends, reconnecting after errors.
async fn connection(
    id: usize,
    spec: &Spec,
    window: Window,
    ramp: &Semaphore,
    totals: &Mutex<Totals>,
    local: &mut Local,
) {
    'conn: while Instant::now() < window.end {
        let permit = ramp.acquire().await.expect("semaphore open");
        let sender = connect(spec.addr).await;
        drop(permit);
        let mut sender = match sender {
            Ok(s) => s,
            Err(e) => {
                local.error(e);
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        loop {
            if sender.ready().await.is_err() {
                continue 'conn;
            }
            let sent = Instant::now();
            let one = exchange(&mut sender, request(spec, id), spec.stream, window, local);
            match tokio::time::timeout_at(window.end, one).await {
                Err(_) => break 'conn,
                Ok(Err(e)) => {
                    if window.contains(Instant::now()) {
                        local.error(e);
                    }
                    continue 'conn;
                }
                Ok(Ok((first, bytes))) => {
                    let done = Instant::now();
                    if window.contains(done) {
                        local.requests += 1;
                        local.bytes += bytes;
                        local.ttft.push(ns(first.unwrap_or(done) - sent));
                        local.total.push(ns(done - sent));
                    }
                }
            }
            if local.full() {
                local.flush(totals);
            }
        }
    }
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Send one request and read the whole response. Returns the time the first
/// content chunk arrived (streams) and the body size.
async fn exchange(
    sender: &mut Sender,
    req: Request<Full<Bytes>>,
    stream: bool,
    window: Window,
    local: &mut Local,
) -> Result<(Option<Instant>, u64), String> {
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| format!("request: {e}"))?;
    let status = res.status();
    let mut body = res.into_body();
    let mut watch = StreamWatch::default();
    let mut bytes = 0u64;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let now = Instant::now();
        bytes += data.len() as u64;
        if stream {
            if let Some(prev) = watch.on_chunk(&data, now) {
                if window.contains(now) {
                    local.gaps.push(ns(now - prev));
                }
            }
        } else {
            watch.keep_tail(&data);
        }
    }
    if status != StatusCode::OK {
        return Err(format!("status {status}"));
    }
    if stream && !watch.complete() {
        return Err("stream ended without its end marker".into());
    }
    Ok((watch.first_content, bytes))
}

/// Follows a streamed body: when content first appears, the gaps between
/// chunks after that, and whether it ended with the end-of-stream marker.
#[derive(Default)]
pub(crate) struct StreamWatch {
    pub first_content: Option<Instant>,
    last_chunk: Option<Instant>,
    tail: Vec<u8>,
}

const TAIL: usize = 32;

impl StreamWatch {
    /// A chunk arrived at `now`; returns the previous chunk's time once
    /// content has started (so the caller can record the gap).
    pub(crate) fn on_chunk(&mut self, data: &[u8], now: Instant) -> Option<Instant> {
        if self.first_content.is_none() {
            let found = if self.tail.is_empty() {
                has_content(data)
            } else {
                let mut joined = self.tail.clone();
                joined.extend_from_slice(data);
                has_content(&joined)
            };
            if found {
                self.first_content = Some(now);
            }
        }
        self.keep_tail(data);
        let prev = self.last_chunk.replace(now);
        self.first_content
            .and(prev)
            .filter(|p| *p >= self.first_content.unwrap_or(now))
    }

    fn keep_tail(&mut self, data: &[u8]) {
        if data.len() >= TAIL {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - TAIL..]);
        } else {
            self.tail.extend_from_slice(data);
            let cut = self.tail.len().saturating_sub(TAIL);
            self.tail.drain(..cut);
        }
    }

    /// The stream ended with `[DONE]` (OpenAI) or `message_stop` (Anthropic).
    pub(crate) fn complete(&self) -> bool {
        let t = &self.tail[..];
        t.ends_with(b"data: [DONE]\n\n") || t.ends_with(b"{\"type\":\"message_stop\"}\n\n")
    }
}

/// Whether a piece of an SSE body carries output text: a non-empty
/// `"content":"…"` (OpenAI) or `"text":"…"` (Anthropic, completions).
pub(crate) fn has_content(buf: &[u8]) -> bool {
    [&b"\"content\":\""[..], b"\"text\":\""].iter().any(|pat| {
        memmem::find_iter(buf, pat).any(|i| buf.get(i + pat.len()).is_some_and(|&c| c != b'"'))
    })
}

/// Hold `n` slow streams open at once until `stop` turns true; returns how
/// many reached their first content chunk and how many failed. `ready` counts
/// streams that are open and streaming.
pub(crate) async fn hold(
    spec: Spec,
    ready: Arc<AtomicUsize>,
    stop: watch::Receiver<bool>,
) -> (usize, usize, Option<String>) {
    let spec = Arc::new(spec);
    let ramp = Arc::new(Semaphore::new(spec.ramp.max(1)));
    let failed = Arc::new(AtomicUsize::new(0));
    let first_error = Arc::new(Mutex::new(None::<String>));
    let mut tasks = Vec::with_capacity(spec.concurrency);
    for id in 0..spec.concurrency {
        let (spec, ramp, ready, failed, first_error, mut stop) = (
            spec.clone(),
            ramp.clone(),
            ready.clone(),
            failed.clone(),
            first_error.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let held = async {
                let mut permit = Some(ramp.acquire().await.expect("semaphore open"));
                let mut sender = connect(spec.addr).await?;
                let res = sender
                    .send_request(request(&spec, id))
                    .await
                    .map_err(|e| format!("request: {e}"))?;
                if res.status() != StatusCode::OK {
                    return Err(format!("status {}", res.status()));
                }
                let mut body = res.into_body();
                let mut counted = false;
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| format!("body: {e}"))?;
                    if !counted && frame.data_ref().is_some_and(|d| has_content(d)) {
                        counted = true;
                        ready.fetch_add(1, Ordering::Relaxed);
                        permit = None;
                    }
                }
                drop(permit);
                Err::<(), String>("stream ended before the hold was released".into())
            };
            tokio::select! {
                r = held => {
                    if let Err(e) = r {
                        failed.fetch_add(1, Ordering::Relaxed);
                        first_error.lock().expect("lock").get_or_insert(e);
                    }
                }
                _ = stop.wait_for(|s| *s) => {}
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let e = first_error.lock().expect("lock").take();
    (
        ready.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        e,
    )
}
