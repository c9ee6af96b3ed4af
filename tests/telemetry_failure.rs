//! Telemetry failure: the collector refuses connections, accepts them and
//! never answers (black hole), answers seconds late, or answers errors
//! (HTTP 500 over http/protobuf, gRPC `UNAVAILABLE` over grpc). Each time the
//! real binary serves a burst of streaming requests from a scripted upstream.
//!
//! Guarantees checked, per failure and protocol:
//! * every client response is byte-identical to what the upstream sent, and
//!   its time to first byte and total time stay within a generous bound of a
//!   healthy-collector run and below the collector's delay: no request waits
//!   for export;
//! * `tokentap.telemetry.dropped`, read from the admin `/metrics` (OTLP is
//!   broken), has `signal="spans"` and `signal="metrics"` series; the span
//!   count is > 0 and at most the spans produced (one per request, minus
//!   those the collector did receive); the data-point count is at most what
//!   the metric reader can have collected; a healthy collector drops nothing;
//! * shutdown with a broken collector finishes in bounded time.
//!
//! And, for a black-hole collector under thousands of requests: the span
//! queue is bounded (every span beyond `span_queue_size` plus one export
//! batch is counted as dropped) and the proxy's RSS stays flat.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::client::{self, HttpClient, Req};
use support::inspect::{self, Scrape};
use support::otlp::{Collector, Fault};
use support::proxy::{Bin, Toml, q};
use support::script::{self, StreamSpec};
use support::upstream::{Reply, Upstream};
use support::{STEP_TIMEOUT, assert_bytes_eq, within};

use support::CHAT;
const DROPPED: &str = "tokentap_telemetry_dropped_total";
/// Concurrent clients in a burst, and requests each sends in turn.
const CLIENTS: usize = 8;
const PER_CLIENT: usize = 25;
/// How long the slow collector holds each export (below its 5 s timeout).
const SLOW_HOLD: Duration = Duration::from_secs(4);
/// Export deadline for the failing collectors, so failures show up soon.
const FAIL_TIMEOUT: &str = "1500ms";
/// Metric export interval (`Toml::otlp`).
const METRIC_INTERVAL: Duration = Duration::from_millis(200);

/// What sits at the OTLP endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Healthy,
    Refused,
    BlackHole,
    Slow,
    Erroring,
}

/// The endpoint for `kind`, and the receiver behind it (kept alive).
async fn collector(kind: Kind, protocol: &str) -> (String, Option<Collector>) {
    let col = match kind {
        Kind::Refused => return (Collector::refused_endpoint(), None),
        Kind::Healthy => Collector::start().await,
        Kind::BlackHole => Collector::start_faulty(Fault::BlackHole).await,
        Kind::Slow => Collector::start_faulty(Fault::Slow(SLOW_HOLD)).await,
        Kind::Erroring if protocol == "grpc" => Collector::start_faulty(Fault::Status(503)).await,
        Kind::Erroring => Collector::start_faulty(Fault::Status(500)).await,
    };
    (col.endpoint(), Some(col))
}

/// The real binary with an admin listener, exporting to `endpoint`.
async fn proxy(toml: Toml) -> (Bin, SocketAddr) {
    let toml = toml.set("telemetry", "access_log", "false");
    let bin = Bin::start(&toml, &["--admin-listen", "127.0.0.1:0"], &[]).await;
    let admin = inspect::admin_addr(&bin).await;
    (bin, admin)
}

/// Client-side timings of one burst, sorted.
#[derive(Debug)]
struct Timings {
    first_byte: Vec<Duration>,
    total: Vec<Duration>,
}

impl Timings {
    fn pct(v: &[Duration], p: f64) -> Duration {
        let i = ((v.len() as f64 - 1.0) * p).round() as usize;
        v[i.min(v.len() - 1)]
    }

    fn summary(&self) -> String {
        format!(
            "first byte p50 {:?} p95 {:?} max {:?}; total p50 {:?} p95 {:?} max {:?}",
            Self::pct(&self.first_byte, 0.5),
            Self::pct(&self.first_byte, 0.95),
            Self::pct(&self.first_byte, 1.0),
            Self::pct(&self.total, 0.5),
            Self::pct(&self.total, 0.95),
            Self::pct(&self.total, 1.0),
        )
    }
}

/// `CLIENTS` clients each send `PER_CLIENT` streaming requests in turn;
/// every response must be byte-identical to `want`.
async fn burst(addr: SocketAddr, want: Arc<Vec<u8>>, what: &str) -> Timings {
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let want = want.clone();
        let what = what.to_owned();
        tasks.push(tokio::spawn(async move {
            let client = client::pooled();
            let mut out = Vec::new();
            for i in 0..PER_CLIENT {
                let req = Req::post_json(addr, CHAT, script::openai_request("m-fail", true, None));
                let got = client::fetch(&client, &req).await;
                assert_eq!(got.status, 200, "{what}: client {c} request {i} status");
                assert!(
                    got.error.is_none(),
                    "{what}: client {c} request {i} broke off: {:?}",
                    got.error
                );
                assert_bytes_eq(
                    &format!("{what}: client {c} request {i} body"),
                    &got.body,
                    &want,
                );
                let first = got.chunks.first().map_or(got.head_after, |(t, _)| *t);
                let total = got.chunks.last().map_or(got.head_after, |(t, _)| *t);
                out.push((first, total));
            }
            out
        }));
    }
    let mut t = Timings {
        first_byte: Vec::new(),
        total: Vec::new(),
    };
    for task in tasks {
        for (first, total) in task.await.unwrap() {
            t.first_byte.push(first);
            t.total.push(total);
        }
    }
    t.first_byte.sort();
    t.total.sort();
    t
}

/// Requests per burst: one span each.
const PRODUCED: f64 = (CLIENTS * PER_CLIENT) as f64;

/// Dropped spans and data points as the admin `/metrics` reports them.
fn dropped(s: &Scrape, what: &str) -> (f64, f64) {
    let spans = s.value(DROPPED, "signal", "spans");
    let points = s.value(DROPPED, "signal", "metrics");
    match (spans, points) {
        (Some(a), Some(b)) => (a, b),
        _ => panic!(
            "{what}: {DROPPED} should have signal=\"spans\" and signal=\"metrics\" series; /metrics:\n{}",
            s.text
        ),
    }
}

/// Most data points the metric reader can have put in failed exports since
/// `started`: one collection per interval at most, each no larger than the
/// series the pull reader shows now.
fn max_points(s: &Scrape, started: Instant) -> f64 {
    let series: usize = s.series_per_family().values().map(|v| v.len()).sum();
    let collections = started.elapsed().as_secs_f64() / METRIC_INTERVAL.as_secs_f64() + 2.0;
    series as f64 * collections
}

/// One scenario: start the collector and proxy, run a burst, check drops.
/// Returns the burst's timings.
async fn scenario(
    kind: Kind,
    protocol: &str,
    reply: &Reply,
    baseline: Option<&Timings>,
) -> Timings {
    let what = format!("{kind:?} collector over {protocol}");
    let up = Upstream::fixed(reply.clone()).await;
    let (endpoint, col) = collector(kind, protocol).await;
    let mut toml = Toml::openai(&up.url()).otlp(&endpoint, protocol);
    toml = match kind {
        Kind::Healthy => toml,
        // Slow answers come inside the (default) deadline; the small queue
        // overflows while each export is held.
        Kind::Slow => toml.set("telemetry", "span_queue_size", "64"),
        _ => toml.set("telemetry", "span_queue_size", "64").set(
            "telemetry",
            "otlp_timeout",
            &q(FAIL_TIMEOUT),
        ),
    };
    let started = Instant::now();
    let (mut bin, admin) = proxy(toml).await;
    let want = Arc::new(reply.body_bytes());
    let t = burst(bin.addr, want, &what).await;
    eprintln!("{what}: {}", t.summary());

    if let Some(base) = baseline {
        check_latency(&what, &t, base);
    }
    let c = client::http1();
    if kind == Kind::Healthy {
        let col = col.as_ref().unwrap();
        within(
            Duration::from_secs(15),
            "spans at the healthy collector",
            async {
                while col.spans().len() < PRODUCED as usize {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        )
        .await;
        let (spans, points) = dropped(&inspect::scrape(&c, admin).await, &what);
        assert_eq!((spans, points), (0.0, 0.0), "{what}: nothing dropped");
    } else {
        check_drops(kind, &what, &c, admin, col.as_ref(), started).await;
    }

    let t0 = Instant::now();
    bin.sigterm();
    bin.wait_exit(Duration::from_secs(30)).await;
    eprintln!("{what}: shutdown took {:?}", t0.elapsed());
    if kind != Kind::Healthy {
        // The last word on drops the collector never saw is the log.
        let logged = within(STEP_TIMEOUT, "the output pipes to drain", async {
            loop {
                let out = bin.output();
                if out.contains("telemetry dropped") {
                    return out;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(logged.contains("since start-up"), "{what}: {logged}");
    }
    drop(col);
    t
}

/// Generous: a request that waited for an export would take at least the
/// export deadline (1.5 s) or the slow collector's hold (4 s).
fn check_latency(what: &str, t: &Timings, base: &Timings) {
    let bound = |b: Duration| b * 2 + Duration::from_millis(250);
    for (name, got, healthy) in [
        ("first byte", &t.first_byte, &base.first_byte),
        ("total", &t.total, &base.total),
    ] {
        let p50 = Timings::pct(got, 0.5);
        let p95 = Timings::pct(got, 0.95);
        assert!(
            p50 <= bound(Timings::pct(healthy, 0.5)),
            "{what}: {name} p50 {p50:?} vs healthy {:?}: telemetry must not slow requests",
            Timings::pct(healthy, 0.5)
        );
        assert!(
            p95 <= bound(Timings::pct(healthy, 0.95)),
            "{what}: {name} p95 {p95:?} vs healthy {:?}: telemetry must not slow requests",
            Timings::pct(healthy, 0.95)
        );
        let max = Timings::pct(got, 1.0);
        assert!(
            max < SLOW_HOLD,
            "{what}: slowest {name} {max:?} is as long as a collector hold"
        );
    }
}

async fn check_drops(
    kind: Kind,
    what: &str,
    c: &HttpClient,
    admin: SocketAddr,
    col: Option<&Collector>,
    started: Instant,
) {
    // Slow exports succeed: only spans overflow the queue.
    let want_points = kind != Kind::Slow;
    let s = within(
        Duration::from_secs(20),
        &format!("{what}: drops counted"),
        async {
            loop {
                let s = inspect::scrape(c, admin).await;
                let (spans, points) = dropped(&s, what);
                if spans > 0.0 && (points > 0.0 || !want_points) {
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    let (spans, points) = dropped(&s, what);
    let received = col.map_or(0, |c| c.spans().len()) as f64;
    assert!(
        spans + received <= PRODUCED,
        "{what}: {spans} spans dropped + {received} received > {PRODUCED} produced"
    );
    let most = max_points(&s, started);
    assert!(
        points <= most,
        "{what}: {points} data points dropped, more than the reader can have collected ({most})"
    );
    eprintln!(
        "{what}: dropped {spans} spans, {points} data points; collector got {received} spans"
    );
    if let Some(col) = col {
        assert!(
            col.attempts() > 0,
            "{what}: the exporter never reached the collector"
        );
    }
    if kind == Kind::Slow {
        let col = col.unwrap();
        within(
            Duration::from_secs(15),
            "spans through the slow collector",
            async {
                while col.spans().is_empty() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        )
        .await;
        // Late but delivered; what arrived plus what was dropped is still
        // no more than what was produced (nothing counted twice).
        let received = col.spans().len() as f64;
        let (spans, _) = dropped(&inspect::scrape(c, admin).await, what);
        assert!(
            spans + received <= PRODUCED,
            "{what}: {spans} spans dropped + {received} received > {PRODUCED} produced"
        );
    }
}

async fn all_failures(protocol: &str) {
    let spec = StreamSpec::tokens(8, Duration::from_millis(20), Duration::from_millis(5));
    let reply = script::openai_chat_sse(&spec);
    let base = scenario(Kind::Healthy, protocol, &reply, None).await;
    for kind in [Kind::Refused, Kind::BlackHole, Kind::Slow, Kind::Erroring] {
        scenario(kind, protocol, &reply, Some(&base)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_collector_over_http_costs_no_latency_and_is_counted() {
    all_failures("http/protobuf").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_collector_over_grpc_costs_no_latency_and_is_counted() {
    all_failures("grpc").await;
}

/// `n` tiny non-streaming requests, `concurrency` at a time.
async fn load(addr: SocketAddr, n: usize, concurrency: usize) {
    client::load(0..n, concurrency, move |_| {
        Req::post_json(addr, CHAT, script::openai_request("m-load", false, None))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn black_hole_collector_keeps_queue_and_memory_bounded() {
    const WARM_UP: usize = 3_000;
    const RUN: usize = 5_000;
    /// The SDK's default export batch (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
    const BATCH: f64 = 512.0;
    const QUEUE: f64 = 2048.0;
    let up = Upstream::fixed(script::openai_chat_json("m", "ok", (1, 1))).await;
    let col = Collector::start_faulty(Fault::BlackHole).await;
    // A deadline longer than the run: every drop here is a full queue.
    let toml = Toml::openai(&up.url())
        .otlp(&col.endpoint(), "http/protobuf")
        .set("telemetry", "otlp_timeout", &q("60s"));
    let (mut bin, admin) = proxy(toml).await;
    let pid = bin.child.id().unwrap();
    let t0 = Instant::now();
    load(bin.addr, WARM_UP, 16).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = inspect::rss_kib(pid);
    load(bin.addr, RUN, 16).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = inspect::rss_kib(pid);
    let elapsed = t0.elapsed();

    let c = client::http1();
    let (spans, _) = dropped(&inspect::scrape(&c, admin).await, "black hole");
    let total = (WARM_UP + RUN) as f64;
    eprintln!(
        "black hole: {total} requests in {elapsed:?}; RSS {before} KiB -> {after} KiB; {spans} spans dropped; {} connections",
        col.attempts()
    );
    assert!(
        spans >= total - QUEUE - BATCH && spans <= total,
        "with nothing exported, all but the queue ({QUEUE}) and one batch ({BATCH}) of {total} spans are dropped and counted; got {spans}"
    );
    let growth = after.saturating_sub(before);
    assert!(
        growth < 20 * 1024,
        "RSS grew {growth} KiB ({before} -> {after}) over {RUN} requests with a black-hole collector"
    );
    bin.sigterm();
    bin.wait_exit(Duration::from_secs(30)).await;
}
