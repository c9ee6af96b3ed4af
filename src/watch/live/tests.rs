//! Tests for the live statistics: samples with explicit times in, windows,
//! caps, expiry and drop counts out.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};

use super::*;
use crate::config::LiveConfig;
use crate::meter::Outcome;

const S: Duration = Duration::from_secs(1);

fn cfg() -> LiveConfig {
    LiveConfig {
        max_series: 10,
        recent: 5,
        ..LiveConfig::default()
    }
}

fn key(route: &str, model: &str, tenant: Option<&str>) -> SeriesKey {
    SeriesKey {
        route: Arc::from(route),
        model: Some(Arc::from(model)),
        tenant: tenant.map(Arc::from),
    }
}

/// A complete request of `key` ending at `end` (the SLO tests start from
/// it too).
pub(crate) fn sample(key: SeriesKey, end: Instant) -> Sample {
    Sample {
        key,
        response_model: None,
        outcome: Outcome::Complete,
        status: 200,
        error_type: None,
        ttft: Some(0.2),
        visible_ttft: None,
        thinking: None,
        decode_tps: Some(50.0),
        max_stall: Some(0.1),
        tokens_in: Some(10),
        tokens_out: Some(20),
        estimated: false,
        duration: 1.0,
        end,
        end_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        trace_id: None,
        span_exported: false,
        prefill_tps: None,
        in_flight: None,
        cost_usd: None,
        unpriced: false,
    }
}

struct Rig {
    agg: Aggregator,
    t0: Instant,
    wall: SystemTime,
}

impl Rig {
    fn new(cfg: LiveConfig) -> Rig {
        let t0 = Instant::now();
        Rig {
            agg: Aggregator::new(&cfg, t0, Arc::new(AtomicU64::new(0))),
            t0,
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        }
    }

    fn at(&self, offset: Duration) -> Instant {
        self.t0 + offset
    }

    fn snap(&mut self, offset: Duration) -> Snapshot {
        self.agg.snapshot(self.t0 + offset, self.wall + offset)
    }
}

fn assert_close(got: Option<f64>, want: f64, what: &str) {
    let got = got.unwrap_or_else(|| panic!("{what}: expected ≈{want}, got None"));
    assert!(
        ((got - want) / want).abs() <= RELATIVE_ERROR,
        "{what}: expected {want} within {RELATIVE_ERROR}, got {got}"
    );
}

#[test]
fn quantiles_per_series_from_known_inputs() {
    let mut r = Rig::new(cfg());
    let k = key("openai", "gpt-4o", None);
    // 100 requests over 50 s: TTFT 10..=1000 ms, decode rate 1..=100 tok/s.
    for i in 1..=100u32 {
        let mut s = sample(k.clone(), r.at(S * i / 2));
        s.ttft = Some(f64::from(i) / 100.0);
        s.decode_tps = Some(f64::from(i));
        s.max_stall = Some(f64::from(i) / 1000.0);
        r.agg.record(s);
    }
    let snap = r.snap(S * 50);
    assert_eq!(snap.series.len(), 1, "one series: {:?}", snap.series);
    let row = &snap.series[0];
    assert_eq!(
        row.requests, 100,
        "all requests inside the 60 s stats window"
    );
    assert_close(row.ttft_p50_s, 0.5, "TTFT p50");
    assert_close(row.ttft_p95_s, 0.95, "TTFT p95");
    assert_close(row.tps_p50, 50.0, "tok/s p50");
    assert_close(row.tps_p5, 5.0, "tok/s p5");
    assert_eq!(row.max_stall_s, Some(0.1), "max stall is the exact maximum");
    assert_close(Some(row.rps), 2.0, "100 requests in the first 50 s");
    assert_eq!(row.window.tokens_out, 2000, "20 tokens × 100 requests");
}

#[test]
fn rate_and_errors_over_the_last_minute() {
    let mut r = Rig::new(cfg());
    let k = key("r", "m", Some("t1"));
    // Old traffic, 5 minutes ago: outside the 60 s stats window, inside the window.
    for i in 0..50u32 {
        r.agg.record(sample(k.clone(), r.at(S * 10 + S * i / 10)));
    }
    // 30 requests in the last minute, 3 of them errors and 2 cancellations.
    for i in 0..30u32 {
        let mut s = sample(k.clone(), r.at(S * 250 + S * i * 2));
        s.outcome = match i {
            0..3 => Outcome::UpstreamError,
            3..5 => Outcome::ClientCancelled,
            _ => Outcome::Complete,
        };
        r.agg.record(s);
    }
    let snap = r.snap(S * 310);
    let row = &snap.series[0];
    assert_eq!(row.requests, 30, "only the last minute counts for the row");
    assert_eq!(row.errors, 3, "upstream errors counted");
    assert_eq!(row.cancelled, 2, "cancellations counted apart");
    assert_close(row.error_ratio, 0.1, "3 errors / 30 requests");
    assert_close(Some(row.rps), 0.5, "30 requests / 60 s");
    assert_eq!(
        row.window.requests, 80,
        "the whole window still holds the old traffic"
    );
}

#[test]
fn buckets_expire_and_idle_series_go_away() {
    let mut r = Rig::new(cfg());
    r.agg.record(sample(key("r", "m", None), r.at(S)));
    let snap = r.snap(S * 599);
    assert_eq!(snap.series.len(), 1, "still inside the 10 min window");
    assert_eq!(snap.series[0].window.requests, 1);
    let any = SeriesFilter::any();
    assert_eq!(snap.window(&any, Duration::from_secs(600)).requests, 1);
    assert_eq!(
        snap.window(&any, Duration::from_secs(60)).requests,
        0,
        "not in the last minute"
    );

    let snap = r.snap(S * 606);
    assert!(
        snap.series.is_empty(),
        "series with an expired window and nothing in flight is removed: {:?}",
        snap.series
    );
    assert_eq!(r.agg.series_count(), 0, "memory released");
    assert_eq!(snap.window(&any, Duration::from_secs(600)).requests, 0);
}

#[test]
fn late_sample_is_counted_not_stored() {
    let mut r = Rig::new(cfg());
    let k = key("r", "m", None);
    // Bucket 120 (t = 600 s) takes slot 0; a sample for bucket 0 is late.
    r.agg.record(sample(k.clone(), r.at(S * 601)));
    r.agg.record(sample(k.clone(), r.at(S)));
    assert_eq!(r.agg.late(), 1, "sample older than the window");
    let snap = r.snap(S * 602);
    assert_eq!(snap.series[0].window.requests, 1, "late sample not counted");
    assert_eq!(snap.late, 1);
    assert_eq!(snap.recent.len(), 2, "late sample still listed as recent");
}

#[test]
fn series_cap_folds_into_other() {
    let mut r = Rig::new(LiveConfig {
        max_series: 2,
        ..cfg()
    });
    for model in ["a", "b", "c", "d"] {
        r.agg.record(sample(key("r", model, None), r.at(S)));
    }
    r.agg.record(sample(key("r", "a", None), r.at(S)));
    let snap = r.snap(S * 2);
    let keys: Vec<_> = snap.keys().cloned().collect();
    assert_eq!(
        keys,
        vec![
            SeriesKey::overflow(),
            key("r", "a", None),
            key("r", "b", None)
        ],
        "two series plus `other`"
    );
    assert_eq!(snap.overflowed, 2, "c and d were folded");
    let other = snap.window(&SeriesFilter::any().route("other"), S * 60);
    assert_eq!(other.requests, 2, "folded samples are counted in `other`");
    let a = snap.window(&SeriesFilter::any().model_exact("a"), S * 60);
    assert_eq!(
        a.requests, 2,
        "admitted series keeps counting after the cap"
    );
}

#[test]
fn recent_ring_keeps_newest_first() {
    let mut r = Rig::new(cfg());
    for i in 0..8u32 {
        let mut s = sample(key("r", "m", None), r.at(S * i));
        s.tokens_out = Some(u64::from(i));
        r.agg.record(s);
    }
    let snap = r.snap(S * 9);
    let outs: Vec<_> = snap.recent.iter().map(|q| q.tokens_out).collect();
    assert_eq!(
        outs,
        [7, 6, 5, 4, 3].map(Some).to_vec(),
        "5 newest, newest first"
    );
}

#[test]
fn in_flight_follows_tokens() {
    let mut r = Rig::new(cfg());
    let k = key("r", "m", Some("t"));
    let held = Arc::new(());
    r.agg.begin(k.clone(), held.clone());
    let gone = Arc::new(());
    r.agg.begin(k.clone(), gone.clone());
    drop(gone);
    let snap = r.snap(S);
    assert_eq!(snap.series.len(), 1, "an in-flight request makes a row");
    assert_eq!(
        snap.series[0].in_flight, 1,
        "the released token is not in flight"
    );
    drop(held);
    let snap = r.snap(S * 2);
    assert!(
        snap.series.is_empty(),
        "no samples, nothing in flight: row gone"
    );
}

#[test]
fn filters_by_route_model_glob_and_tenant() {
    let mut r = Rig::new(cfg());
    for (route, model, tenant) in [
        ("openai", "gpt-4o", Some("a")),
        ("openai", "gpt-4o-mini", Some("b")),
        ("anthropic", "claude-sonnet", None),
    ] {
        r.agg.record(sample(key(route, model, tenant), r.at(S)));
    }
    let mut none = sample(key("openai", "x", None), r.at(S));
    none.key.model = None;
    r.agg.record(none);
    let snap = r.snap(S * 2);
    let n = |f: SeriesFilter| snap.window(&f, S * 60).requests;
    assert_eq!(n(SeriesFilter::any()), 4);
    assert_eq!(n(SeriesFilter::any().route("openai")), 3);
    assert_eq!(n(SeriesFilter::any().model("gpt-4o*")), 2);
    assert_eq!(
        n(SeriesFilter::any().model("gpt-4o")),
        1,
        "no wildcard: exact"
    );
    assert_eq!(
        n(SeriesFilter::any().model("*")),
        4,
        "`*` matches no model too"
    );
    assert_eq!(n(SeriesFilter::any().model("claude-*").route("openai")), 0);
    assert_eq!(n(SeriesFilter::any().tenant("b")), 1);
    assert_eq!(n(SeriesFilter::any().model_exact("gpt-4o*")), 0, "literal");
    assert_eq!(
        snap.models(),
        vec!["claude-sonnet", "gpt-4o", "gpt-4o-mini"],
        "distinct named models"
    );
}

#[test]
fn glob_matching() {
    let cases = [
        ("gpt-*", "gpt-4o", true),
        ("gpt-*", "gpt", false),
        ("*mini", "gpt-4o-mini", true),
        ("g?t-*o", "gpt-4o", true),
        ("*", "", true),
        ("a*b*c", "aXbYbZc", true),
        ("a*b*c", "aXbYbZ", false),
        ("llama-3.1-*b", "llama-3.1-70b", true),
    ];
    for (pattern, text, want) in cases {
        assert_eq!(
            Glob::new(pattern).matches(text),
            want,
            "{pattern:?} against {text:?}"
        );
    }
}

#[test]
fn window_clamps_and_reports_span() {
    let mut r = Rig::new(cfg());
    let k = key("r", "m", None);
    for i in 0..40u32 {
        r.agg.record(sample(k.clone(), r.at(S * 3 * i)));
    }
    let snap = r.snap(S * 120);
    let w = snap.window(&SeriesFilter::any(), Duration::from_secs(3600));
    assert_eq!(w.span, S * 120, "clamped to the time since start");
    assert_eq!(w.requests, 40);
    assert_eq!(w.series, 1);
    assert_close(Some(w.rate()), 40.0 / 120.0, "rate over the span");
    assert_eq!(snap.window_len(), Duration::from_secs(600));
    let w = snap.window(&SeriesFilter::any(), S * 30);
    // Buckets 18..=24 (90 s ..= 120 s): samples at 90, 93, …, 117.
    assert_eq!(w.requests, 10, "last 30 s plus the partial bucket");
    assert_eq!(w.span, S * 30);
}

#[test]
fn timeline_has_one_point_per_bucket_per_model() {
    let mut r = Rig::new(cfg());
    for i in 0..20u32 {
        r.agg.record(sample(key("r", "fast", None), r.at(S * i)));
        if i % 2 == 0 {
            let mut s = sample(key("r", "slow", Some("t")), r.at(S * i));
            s.ttft = Some(2.0);
            s.outcome = Outcome::Malformed;
            r.agg.record(s);
        }
    }
    let snap = r.snap(S * 20);
    let names: Vec<_> = snap.models.iter().map(|m| m.model.as_deref()).collect();
    assert_eq!(names, vec![Some("fast"), Some("slow")]);
    let fast = &snap.models[0];
    assert_eq!(fast.points.len(), 5, "buckets 0..=4 since start");
    assert_eq!(fast.points[0].requests, 5, "5 per 5 s bucket");
    assert_close(Some(fast.points[0].rps), 1.0, "1 req/s");
    assert_close(fast.points[0].ttft_p50_s, 0.2, "fast TTFT");
    let slow = &snap.models[1];
    assert_close(slow.points[1].ttft_p50_s, 2.0, "slow TTFT");
    assert!(slow.points[1].errors > 0, "errors per point");
    assert_eq!(
        fast.points[1].t_ms - fast.points[0].t_ms,
        5000,
        "points are a bucket apart"
    );
    assert_eq!(fast.points[4].requests, 0, "current bucket is still empty");
}

#[test]
fn json_shape() {
    let mut r = Rig::new(cfg());
    let mut s = sample(key("r", "m", None), r.at(S));
    s.trace_id = Some(opentelemetry::trace::TraceId::from_bytes(
        0xabc_u128.to_be_bytes(),
    ));
    r.agg.record(s);
    let v = serde_json::to_value(r.snap(S * 2)).expect("snapshot serializes");
    for k in [
        "generated_at_ms",
        "window_s",
        "bucket_s",
        "stats_window_s",
        "dropped",
        "series",
        "models",
        "recent",
    ] {
        assert!(v.get(k).is_some(), "snapshot JSON lacks `{k}`: {v}");
    }
    let row = &v["series"][0];
    assert_eq!(row["route"], "r");
    assert_eq!(row["model"], "m");
    assert!(row["tenant"].is_null(), "no tenant is null");
    assert!(row["ttft_p95_s"].is_number());
    assert_eq!(row["window"]["requests"], 1);
    let recent = &v["recent"][0];
    assert_eq!(recent["outcome"], "complete");
    assert_eq!(recent["trace_id"], "00000000000000000000000000000abc");
    assert!(v.get("windows").is_none(), "bucket data is not serialized");
}

#[test]
fn full_queue_drops_and_counts() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        // The aggregator task cannot run before this block yields, so the
        // queue fills up.
        let live = Live::start(&cfg());
        let k = key("r", "m", None);
        for _ in 0..QUEUE + 7 {
            live.finish(sample(k.clone(), Instant::now()));
        }
        assert_eq!(live.dropped(), 7, "messages beyond the queue are dropped");
        let mut rx = live.subscribe();
        let snap = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                rx.changed().await.expect("aggregator alive");
                let s = rx.borrow_and_update().clone();
                if s.series.iter().any(|r| r.window.requests > 0) {
                    return s;
                }
            }
        })
        .await
        .expect("a snapshot with the queued samples within 5 s");
        assert_eq!(snap.dropped, 7, "drops reported in the snapshot");
        assert_eq!(
            snap.series[0].window.requests, QUEUE as u64,
            "every queued sample aggregated"
        );
    });
}

#[test]
fn without_a_runtime_everything_counts_as_dropped() {
    let live = Live::start(&cfg());
    let req = live.begin(key("r", "m", None));
    live.finish(sample(req.key().clone(), Instant::now()));
    assert_eq!(live.dropped(), 2, "begin and finish dropped");
    assert!(live.snapshot().series.is_empty());
}

#[test]
fn incomplete_streams_are_errors_in_the_live_windows() {
    let mut r = Rig::new(cfg());
    for i in 0..4u32 {
        let mut s = sample(key("r", "m", None), r.at(S * i));
        if i == 0 {
            s.outcome = Outcome::Incomplete;
        }
        r.agg.record(s);
    }
    let snap = r.snap(S * 4);
    let w = snap.window(&SeriesFilter::any(), S * 30);
    assert_eq!(
        (w.requests, w.errors),
        (4, 1),
        "a stream without its terminal event counts as an error"
    );
}

#[test]
fn visible_ttft_and_thinking_time_per_series() {
    let mut r = Rig::new(cfg());
    let k = key("deepseek", "deepseek-reasoner", None);
    // 10 plain requests (visible TTFT = TTFT = 0.2 s), 10 that reasoned for
    // 0.3 s after a 0.1 s TTFT (visible TTFT 0.4 s).
    for i in 0..20u32 {
        let mut s = sample(k.clone(), r.at(S * (i + 1)));
        if i % 2 == 0 {
            s.visible_ttft = Some(0.2);
        } else {
            s.ttft = Some(0.1);
            s.visible_ttft = Some(0.4);
            s.thinking = Some(0.3);
        }
        r.agg.record(s);
    }
    let snap = r.snap(S * 21);
    let row = &snap.series[0];
    assert_eq!(row.reasoning_requests, 10, "requests that reasoned");
    assert_close(row.thinking_p50_s, 0.3, "thinking p50");
    assert_close(row.visible_ttft_p95_s, 0.4, "visible TTFT p95");
    assert_close(row.ttft_p95_s, 0.2, "TTFT p95 (reasoning counts as output)");
    let recent = &snap.recent[0];
    assert_eq!(recent.thinking_s, Some(0.3), "newest request reasoned");
    assert_eq!(recent.visible_ttft_s, Some(0.4));
}
