use opentelemetry::{KeyValue, Value};

use super::*;
use crate::attrs::*;
use crate::meter::Outcome;
use crate::pricing::CostSource;
use crate::telemetry::span::finish_attributes;
use crate::telemetry::tests::{facts, measurement};

fn limits(max_sessions: usize, idle: Duration) -> SessionLimits {
    SessionLimits {
        max_sessions,
        idle_timeout: idle,
    }
}

/// A finished request of `session` that ended `end_ms` after `base`.
fn request(session: &str, base: Instant, end_ms: u64) -> Measurement {
    let mut f = facts(Some("gpt-4o"), None, true);
    f.session = Some(Arc::from(session));
    f.start = base + Duration::from_millis(end_ms);
    f.start_wall += Duration::from_millis(end_ms);
    let mut m = measurement(f);
    m.duration = Duration::ZERO;
    m
}

fn priced(usd: f64) -> RequestCost {
    RequestCost::of(Some(CostRecord::Priced {
        usd,
        source: CostSource::Table,
        estimated: false,
    }))
}

fn int(attrs: &[KeyValue], key: &str) -> u64 {
    attrs
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map_or(0, |kv| match &kv.value {
            Value::I64(n) => u64::try_from(*n).unwrap_or(0),
            other => panic!("{key} is not an integer: {other:?}"),
        })
}

#[test]
fn a_rollup_is_the_sum_of_its_spans_usage_and_cost() {
    let rollups = SessionRollups::new(SessionLimits::default());
    let base = Instant::now();
    let mut ms = Vec::new();
    let mut a = request("s-1", base, 0);
    a.duration = Duration::from_millis(750);
    ms.push((a, priced(0.0125)));
    let mut b = request("s-1", base, 10);
    b.usage.input = Some(1000);
    b.usage.cache_creation = Some(300);
    b.output_tokens = None;
    b.usage.output = Some(40);
    b.reasoning.tokens = None;
    b.duration = Duration::from_millis(1250);
    b.time_to_first_token = Some(Duration::from_millis(900));
    b.tools.client_calls = 2;
    b.tools.server.web_search = 1;
    ms.push((b, priced(0.5)));
    let mut c = request("s-1", base, 20);
    c.outcome = Outcome::UpstreamError;
    c.usage = Default::default();
    c.output_tokens = None;
    c.reasoning = Default::default();
    c.time_to_first_token = None;
    c.duration = Duration::from_millis(100);
    ms.push((c, RequestCost::of(Some(CostRecord::Unpriced))));
    ms.push((request("other", base, 30), priced(7.0)));

    let mut want = [0u64; 5];
    let mut cost = 0.0;
    for (m, c) in &ms {
        rollups.record(m, *c);
        if m.request.session.as_deref() != Some("s-1") {
            continue;
        }
        let mut attrs = Vec::new();
        finish_attributes(m, &mut attrs);
        for (sum, key) in want.iter_mut().zip([
            GEN_AI_USAGE_INPUT_TOKENS,
            GEN_AI_USAGE_OUTPUT_TOKENS,
            GEN_AI_USAGE_CACHE_READ,
            GEN_AI_USAGE_CACHE_WRITE,
            GEN_AI_USAGE_REASONING,
        ]) {
            *sum += int(&attrs, key);
        }
        if let RequestCost::Priced(usd) = c {
            cost += usd;
        }
    }
    let s = rollups.get("s-1").expect("s-1 is kept");
    assert_eq!(
        [
            s.input_tokens,
            s.output_tokens,
            s.cache_read_tokens,
            s.cache_write_tokens,
            s.reasoning_tokens
        ],
        want,
        "token sums equal the spans' gen_ai.usage.* sums: {s:?}"
    );
    assert_eq!(want, [1012, 51, 8, 300, 2], "the fixture's own sums");
    assert_eq!(s.cost_usd, cost, "the spans' cost, summed");
    assert_eq!((s.requests, s.errors, s.unpriced_requests), (3, 1, 1));
    assert_eq!((s.tool_calls, s.server_tool_uses), (2, 1));
    assert!((s.wait_seconds - 2.1).abs() < 1e-9, "{}", s.wait_seconds);
    let p50 = s.ttft_p50_seconds.expect("two TTFTs");
    assert!(
        (0.2 / 1.123..=0.2 * 1.123).contains(&p50),
        "median of 0.2 s and 0.9 s by nearest rank is 0.2 s: {p50}"
    );
    assert_eq!(s.first_seen, "2023-11-14T22:13:20.000Z");
    assert_eq!(s.last_seen, "2023-11-14T22:13:21.260Z", "b ended last");
    assert_eq!(rollups.get("nobody"), None);
}

#[test]
fn requests_without_a_session_are_not_rolled_up() {
    let rollups = SessionRollups::new(SessionLimits::default());
    rollups.record(&measurement(facts(None, None, false)), priced(1.0));
    assert_eq!(rollups.counts(), (0, 0));
    assert!(rollups.list(SortBy::LastSeen, 10).is_empty());
}

#[test]
fn the_table_keeps_at_most_max_sessions_evicting_the_least_recently_seen() {
    let rollups = SessionRollups::new(limits(3, Duration::from_secs(3600)));
    let base = Instant::now();
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        rollups.record(&request(id, base, i as u64), RequestCost::None);
    }
    // `a` is seen again, so `b` is now the least recently seen.
    rollups.record(&request("a", base, 3), RequestCost::None);
    rollups.record(&request("d", base, 4), RequestCost::None);
    assert_eq!(rollups.counts(), (3, 1), "three kept, one evicted");
    assert!(rollups.get("b").is_none(), "b was evicted");
    for id in ["a", "c", "d"] {
        assert!(rollups.get(id).is_some(), "{id} is kept");
    }
    assert_eq!(rollups.get("a").map(|s| s.requests), Some(2));
    for i in 0..100u64 {
        rollups.record(&request(&format!("x{i}"), base, 10 + i), RequestCost::None);
    }
    assert_eq!(rollups.counts().0, 3, "never more than max_sessions");
    let kept: Vec<String> = rollups
        .list(SortBy::LastSeen, 10)
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(kept, ["x99", "x98", "x97"], "the three most recent");
    let t = rollups.table.lock().expect("table");
    assert!(t.slots.len() <= 3, "slots are reused: {}", t.slots.len());
}

#[test]
fn idle_sessions_are_forgotten() {
    let idle = Duration::from_secs(60);
    let rollups = SessionRollups::new(limits(100, idle));
    let base = Instant::now();
    rollups.record(&request("old", base, 0), priced(1.0));
    rollups.record(&request("kept", base, 30_000), priced(1.0));
    // 61 s after `old`'s last request: it is past the idle timeout.
    rollups.record(&request("new", base, 61_000), priced(1.0));
    let t = rollups.table.lock().expect("table");
    assert!(!t.index.contains_key("old"), "old expired");
    assert!(t.index.contains_key("kept") && t.index.contains_key("new"));
    assert_eq!(t.evicted, 0, "expiry is not eviction");
    drop(t);
    // A new request of an expired session starts a new rollup.
    rollups.record(&request("old", base, 62_000), priced(2.0));
    assert_eq!(
        rollups.get("old").map(|s| (s.requests, s.cost_usd)),
        Some((1, 2.0))
    );
    // Reading expires against the clock: a short timeout forgets everything.
    let short = SessionRollups::new(limits(10, Duration::from_millis(1)));
    short.record(&request("s", base, 0), RequestCost::None);
    std::thread::sleep(Duration::from_millis(20));
    assert!(short.list(SortBy::LastSeen, 10).is_empty());
    assert!(short.get("s").is_none());
}

#[test]
fn lists_sort_by_cost_wait_or_last_seen_and_honour_the_limit() {
    let rollups = SessionRollups::new(SessionLimits::default());
    let base = Instant::now();
    for (i, (id, usd, wait_ms)) in [("a", 3.0, 100), ("b", 1.0, 900), ("c", 2.0, 500)]
        .into_iter()
        .enumerate()
    {
        let mut m = request(id, base, i as u64);
        m.duration = Duration::from_millis(wait_ms);
        rollups.record(&m, priced(usd));
    }
    let ids = |order, limit| -> Vec<String> {
        rollups
            .list(order, limit)
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(ids(SortBy::Cost, 10), ["a", "c", "b"]);
    assert_eq!(ids(SortBy::Wait, 2), ["b", "c"]);
    assert_eq!(
        ids(SortBy::LastSeen, 10),
        ["b", "c", "a"],
        "by end: b 901 ms, c 502 ms, a 100 ms"
    );
    assert!(ids(SortBy::Cost, 0).is_empty());
    assert_eq!(SortBy::parse("wait"), Some(SortBy::Wait));
    assert_eq!(SortBy::parse("tokens"), None);
}

#[test]
fn the_ttft_median_is_within_its_stated_bound() {
    for secs in [0.011, 0.05, 0.3, 1.0, 2.7, 19.0, 400.0] {
        let mut h = TtftHistogram::default();
        // Below, at and above: the median is `secs`.
        for v in [secs * 0.5, secs, secs * 3.0] {
            h.add(Duration::from_secs_f64(v));
        }
        let p50 = h.median().expect("three values");
        let err = (p50 / secs - 1.0).abs();
        assert!(err <= 0.123, "{secs} s estimated as {p50} s ({err:.3})");
    }
    assert_eq!(TtftHistogram::default().median(), None);
    let mut h = TtftHistogram::default();
    h.add(Duration::from_secs(10_000));
    assert!(
        h.median().is_some_and(|p| p > 500.0),
        "large values fold into the top bucket"
    );
}
