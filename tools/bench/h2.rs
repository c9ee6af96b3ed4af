//! The HTTP/2 upstream scenario (issue 18): an in-process h2c upstream
//! (the `h2` crate's server, SETTINGS_MAX_CONCURRENT_STREAMS chosen) that
//! answers every request with an OpenAI-style SSE stream lasting about a
//! second, and many concurrent streaming clients in. Out: TTFT and total
//! time per request, direct (each client its own h2c connection, as apps
//! do) and through tokentap (HTTP/1.1 clients; tokentap multiplexes them
//! onto h2c upstream connections), plus the connections the upstream
//! accepted and tokentap's pool wait from its `/metrics`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

use crate::hist::Hist;

/// Content chunks per answer after the first.
const MORE_CHUNKS: usize = 20;
/// Gap between content chunks: an answer lasts MORE_CHUNKS × this.
const GAP: Duration = Duration::from_millis(50);
/// Path the clients ask for (`/h2` is tokentap's route prefix).
pub(crate) const PATH: &str = "/h2/v1/chat/completions";
const BODY: &str =
    r#"{"model":"bench-h2","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// What the upstream counted.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    /// Connections accepted.
    pub connections: AtomicUsize,
    /// Streams answered.
    pub streams: AtomicUsize,
    /// The most streams open at once on one connection.
    pub max_open_per_conn: AtomicUsize,
    /// Connections open now.
    pub open: AtomicUsize,
    /// The most connections open at once.
    pub peak_open: AtomicUsize,
}

impl Seen {
    /// Start a run: the maxima restart from what is open now.
    pub(crate) fn reset_peaks(&self) {
        self.max_open_per_conn.store(0, Ordering::Relaxed);
        self.peak_open
            .store(self.open.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// Serve h2c on a fresh 127.0.0.1 port, at most `max_streams` streams per
/// connection; returns the address and the counters.
pub(crate) async fn start_upstream(max_streams: u32) -> Result<(SocketAddr, Arc<Seen>), String> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(connection(tcp, max_streams, s.clone()));
        }
    });
    Ok((addr, seen))
}

async fn connection(tcp: TcpStream, max_streams: u32, seen: Arc<Seen>) {
    seen.connections.fetch_add(1, Ordering::Relaxed);
    let now = seen.open.fetch_add(1, Ordering::Relaxed) + 1;
    seen.peak_open.fetch_max(now, Ordering::Relaxed);
    serve_connection(tcp, max_streams, &seen).await;
    seen.open.fetch_sub(1, Ordering::Relaxed);
}

async fn serve_connection(tcp: TcpStream, max_streams: u32, seen: &Seen) {
    let Ok(mut conn) = h2::server::Builder::new()
        .max_concurrent_streams(max_streams)
        .handshake::<_, Bytes>(tcp)
        .await
    else {
        return;
    };
    let open = Arc::new(AtomicUsize::new(0));
    while let Some(Ok((req, respond))) = conn.accept().await {
        seen.streams.fetch_add(1, Ordering::Relaxed);
        let now = open.fetch_add(1, Ordering::Relaxed) + 1;
        seen.max_open_per_conn.fetch_max(now, Ordering::Relaxed);
        let open = open.clone();
        tokio::spawn(async move {
            let _ = answer(req, respond).await;
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn chunk(content: &str) -> Bytes {
    Bytes::from(format!(
        "data: {{\"id\":\"chatcmpl-h2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"bench-h2\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":null}}]}}\n\n"
    ))
}

async fn answer(
    req: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) -> Result<(), h2::Error> {
    // Read the (small) request body so its stream closes cleanly.
    let mut body = req.into_body();
    while let Some(data) = body.data().await {
        let data = data?;
        let _ = body.flow_control().release_capacity(data.len());
    }
    let res = http::Response::builder()
        .header("content-type", "text/event-stream")
        .body(())
        .map_err(|_| h2::Reason::INTERNAL_ERROR)?;
    let mut send = respond.send_response(res, false)?;
    send.send_data(chunk("Hello"), false)?;
    for _ in 0..MORE_CHUNKS {
        tokio::time::sleep(GAP).await;
        send.send_data(chunk(" tok"), false)?;
    }
    let usage = "data: {\"id\":\"chatcmpl-h2\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"bench-h2\",\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":21,\"total_tokens\":29}}\n\ndata: [DONE]\n\n";
    send.send_data(Bytes::from_static(usage.as_bytes()), true)
}

/// How the clients reach the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Each client its own h2c connection to the upstream.
    Direct,
    /// Each client its own HTTP/1.1 connection to tokentap.
    Proxy,
}

/// One run's client-side figures.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct H2Report {
    pub streams: usize,
    pub duration_s: f64,
    pub requests: u64,
    pub errors: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub ttft_max_ms: Option<f64>,
    pub total_p50_ms: Option<f64>,
    pub total_p99_ms: Option<f64>,
    pub first_error: Option<String>,
}

#[derive(Default)]
struct Totals {
    ttft: Hist,
    total: Hist,
    requests: u64,
    errors: u64,
    first_error: Option<String>,
}

/// `streams` clients each streaming request after request to `addr` for
/// `warmup` + `duration`; requests that start inside the window count.
pub(crate) async fn run(
    addr: SocketAddr,
    via: Via,
    streams: usize,
    warmup: Duration,
    duration: Duration,
) -> H2Report {
    let start = Instant::now() + warmup;
    let end = start + duration;
    let totals = Arc::new(Mutex::new(Totals::default()));
    // At most 64 connections being opened at once (the accept queue).
    let ramp = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::with_capacity(streams);
    for _ in 0..streams {
        let (totals, ramp) = (totals.clone(), ramp.clone());
        tasks.push(tokio::spawn(async move {
            let r = match via {
                Via::Direct => client_h2(addr, start, end, &totals, &ramp).await,
                Via::Proxy => client_h1(addr, start, end, &totals, &ramp).await,
            };
            if let Err(e) = r {
                if let Ok(mut t) = totals.lock() {
                    t.errors += 1;
                    t.first_error.get_or_insert(e);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let t = totals
        .lock()
        .map(|mut t| std::mem::take(&mut *t))
        .unwrap_or_default();
    let ms = |h: &Hist, q: f64| h.quantile(q).map(|ns| ns as f64 / 1e6);
    H2Report {
        streams,
        duration_s: duration.as_secs_f64(),
        requests: t.requests,
        errors: t.errors,
        ttft_p50_ms: ms(&t.ttft, 0.5),
        ttft_p99_ms: ms(&t.ttft, 0.99),
        ttft_max_ms: t.ttft.max().map(|ns| ns as f64 / 1e6),
        total_p50_ms: ms(&t.total, 0.5),
        total_p99_ms: ms(&t.total, 0.99),
        first_error: t.first_error,
    }
}

fn request(uri: String) -> Result<http::Request<Full<Bytes>>, String> {
    http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::AUTHORIZATION, "Bearer sk-bench-h2")
        .body(Full::new(Bytes::from_static(BODY.as_bytes())))
        .map_err(|e| e.to_string())
}

/// Read one streamed answer: (TTFT, total) from `sent`.
async fn read_answer(
    res: http::Response<hyper::body::Incoming>,
    sent: Instant,
) -> Result<(Duration, Duration), String> {
    if res.status() != http::StatusCode::OK {
        return Err(format!("status {}", res.status()));
    }
    let mut body = res.into_body();
    let mut ttft = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("body: {e}"))?;
        if let Some(d) = frame.data_ref() {
            if ttft.is_none() && memchr::memmem::find(d, b"\"content\"").is_some() {
                ttft = Some(sent.elapsed());
            }
        }
    }
    let ttft = ttft.ok_or("no content chunk")?;
    Ok((ttft, sent.elapsed()))
}

fn record(totals: &Mutex<Totals>, ttft: Duration, total: Duration) {
    if let Ok(mut t) = totals.lock() {
        t.ttft.record(ttft.as_nanos() as u64);
        t.total.record(total.as_nanos() as u64);
        t.requests += 1;
    }
}

async fn client_h2(
    addr: SocketAddr,
    start: Instant,
    end: Instant,
    totals: &Mutex<Totals>,
    ramp: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let permit = ramp.acquire().await.map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .map_err(|e| format!("h2 handshake: {e}"))?;
    drop(permit);
    tokio::spawn(async move {
        let _ = conn.await;
    });
    while Instant::now() < end {
        let sent = Instant::now();
        let res = sender
            .send_request(request(format!("http://{addr}{PATH}"))?)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let (ttft, total) = read_answer(res, sent).await?;
        if sent >= start && sent < end {
            record(totals, ttft, total);
        }
    }
    Ok(())
}

async fn client_h1(
    addr: SocketAddr,
    start: Instant,
    end: Instant,
    totals: &Mutex<Totals>,
    ramp: &tokio::sync::Semaphore,
) -> Result<(), String> {
    let permit = ramp.acquire().await.map_err(|e| e.to_string())?;
    let mut sender = crate::load::connect(addr).await?;
    drop(permit);
    while Instant::now() < end {
        let sent = Instant::now();
        let mut req = request(PATH.to_owned())?;
        req.headers_mut().insert(
            http::header::HOST,
            http::HeaderValue::from_str(&addr.to_string()).map_err(|e| e.to_string())?,
        );
        let res = sender
            .send_request(req)
            .await
            .map_err(|e| format!("request: {e}"))?;
        let (ttft, total) = read_answer(res, sent).await?;
        if sent >= start && sent < end {
            record(totals, ttft, total);
        }
    }
    Ok(())
}

/// `tokentap_upstream_pool_wait_seconds` summed over label sets: count,
/// sum, and cumulative bucket counts by upper bound.
#[derive(Debug, Clone, Default)]
pub(crate) struct PoolWait {
    pub count: f64,
    pub sum: f64,
    pub buckets: Vec<(f64, f64)>,
}

impl PoolWait {
    /// Parse Prometheus text.
    pub(crate) fn parse(text: &str) -> PoolWait {
        let mut p = PoolWait::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("tokentap_upstream_pool_wait_seconds") else {
                continue;
            };
            let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
                continue;
            };
            if rest.starts_with("_count") {
                p.count += v;
            } else if rest.starts_with("_sum") {
                p.sum += v;
            } else if rest.starts_with("_bucket") {
                let le = rest
                    .split("le=\"")
                    .nth(1)
                    .and_then(|s| s.split('"').next())
                    .and_then(|s| {
                        if s == "+Inf" {
                            Some(f64::INFINITY)
                        } else {
                            s.parse().ok()
                        }
                    });
                if let Some(le) = le {
                    match p.buckets.iter_mut().find(|(b, _)| *b == le) {
                        Some((_, c)) => *c += v,
                        None => p.buckets.push((le, v)),
                    }
                }
            }
        }
        p.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        p
    }

    /// What was recorded between `before` and `self`: (count, mean ms,
    /// upper bound of the p99 bucket in ms).
    pub(crate) fn since(&self, before: &PoolWait) -> (f64, Option<f64>, Option<f64>) {
        let count = self.count - before.count;
        if count <= 0.0 {
            return (0.0, None, None);
        }
        let mean = (self.sum - before.sum) / count * 1000.0;
        let p99 = self.buckets.iter().find_map(|(le, c)| {
            let prev = before
                .buckets
                .iter()
                .find(|(b, _)| b == le)
                .map_or(0.0, |x| x.1);
            (c - prev >= 0.99 * count).then_some(*le * 1000.0)
        });
        (count, Some(mean), p99)
    }
}

/// GET `http://addr/metrics` (tokentap's admin listener).
pub(crate) async fn scrape(addr: SocketAddr) -> Result<String, String> {
    let mut sender = crate::load::connect(addr).await?;
    let req = http::Request::get("/metrics")
        .header(http::header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(String::from_utf8_lossy(&body).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_wait_parses_and_differences() {
        let before = PoolWait::parse(
            "tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"0.001\"} 10\n\
             tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"0.5\"} 10\n\
             tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"+Inf\"} 10\n\
             tokentap_upstream_pool_wait_seconds_sum{tokentap_route=\"h2\"} 0.002\n\
             tokentap_upstream_pool_wait_seconds_count{tokentap_route=\"h2\"} 10\n",
        );
        let after = PoolWait::parse(
            "tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"0.001\"} 100\n\
             tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"0.5\"} 109\n\
             tokentap_upstream_pool_wait_seconds_bucket{tokentap_route=\"h2\",le=\"+Inf\"} 110\n\
             tokentap_upstream_pool_wait_seconds_sum{tokentap_route=\"h2\"} 1.002\n\
             tokentap_upstream_pool_wait_seconds_count{tokentap_route=\"h2\"} 110\n",
        );
        let (count, mean, p99) = after.since(&before);
        assert_eq!(count, 100.0);
        assert!((mean.expect("a mean") - 10.0).abs() < 1e-9, "{mean:?}");
        assert_eq!(
            p99,
            Some(500.0),
            "the 99th of 100 new waits is in the 0.5 s bucket"
        );
    }
}
