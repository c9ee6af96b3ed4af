use std::time::Duration;

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use super::*;
use crate::telemetry::tests::{facts, measurement};

/// The specification's table of 1-in-N thresholds at precision 4.
#[test]
fn thresholds_match_the_specification_table() {
    for (ratio, th) in [
        (1.0, "0"),
        (0.5, "8"),
        (1.0 / 3.0, "aaab"),
        (0.25, "c"),
        (0.2, "cccd"),
        (0.125, "e"),
        (0.1, "e666"),
        (0.0625, "f"),
        (0.01, "fd70a"),
        (0.001, "ffbe77"),
        (0.0001, "fff9724"),
        (0.00001, "ffff583a"),
        (0.000001, "ffffef39"),
    ] {
        let got = threshold(ratio).map(th_value);
        assert_eq!(got.as_deref(), Some(th), "ratio {ratio}");
    }
    assert_eq!(threshold(0.0), None, "ratio 0 keeps no ordinary span");
    assert_eq!(adjusted_count(0), 1.0);
    let w = adjusted_count(threshold(0.01).expect("th"));
    assert!((w - 100.0).abs() < 0.01, "about 1/0.01: {w}");
    assert_eq!(adjusted_count(threshold(0.25).expect("th")), 4.0);
}

fn cfg(ratio: f64) -> SamplingConfig {
    SamplingConfig {
        ratio,
        ..SamplingConfig::default()
    }
}

fn remote(flags: TraceFlags, state: &str) -> SpanContext {
    let state = if state.is_empty() {
        TraceState::default()
    } else {
        state.parse().expect("tracestate")
    };
    SpanContext::new(TraceId::from(1u128), SpanId::from(2u64), flags, true, state)
}

#[test]
fn the_ratio_keeps_randomness_at_or_above_the_threshold() {
    let s = Sampler::new(&cfg(0.25));
    let th = 0xc0_0000_0000_0000_u128;
    // Only the low 56 bits count: the high ones are ignored.
    assert!(s.head(th, None).by_ratio);
    assert!(s.head((0xff << 64) | th, None).by_ratio);
    assert!(!s.head(th - 1, None).by_ratio);
    assert!(s.head(u128::from(u64::MAX), None).by_ratio);
    // An explicit `rv` wins over the trace id.
    let p = remote(TraceFlags::default(), "ot=rv:c0000000000000");
    assert!(s.head(0, Some(&p)).by_ratio, "rv = th is kept");
    let p = remote(TraceFlags::default(), "ot=rv:bfffffffffffff");
    assert!(!s.head(u128::MAX, Some(&p)).by_ratio);
    // Ratio 0 keeps none; ratio 1 keeps all.
    assert!(!Sampler::new(&cfg(0.0)).head(u128::MAX, None).by_ratio);
    assert!(Sampler::new(&cfg(1.0)).head(0, None).by_ratio);
}

#[test]
fn the_share_kept_follows_the_ratio() {
    let s = Sampler::new(&cfg(0.1));
    let mut rng = fastrand::Rng::with_seed(7);
    let n = 100_000;
    let kept = (0..n)
        .filter(|_| s.head(rng.u128(..), None).by_ratio)
        .count();
    // Binomial sd = sqrt(n p (1-p)) ≈ 95; allow 6 sd.
    assert!((9_430..=10_570).contains(&kept), "{kept} of {n} at 0.1");
}

#[test]
fn special_requests_are_always_kept_with_weight_one() {
    let s = Sampler::new(&SamplingConfig {
        ratio: 0.0,
        keep_ttft_over: Some(Duration::from_secs(2)),
        keep_stall_over: Some(Duration::from_secs(1)),
        keep_duration_over: Some(Duration::from_secs(60)),
        respect_parent: false,
    });
    let head = s.head(u128::MAX, None);
    let plain = measurement(facts(Some("m"), None, true));
    assert_eq!(s.decide(&plain, &head, false, false), None, "ratio 0");
    let reason = |f: &dyn Fn(&mut Measurement), slo: bool, first: bool| {
        let mut m = plain.clone();
        f(&mut m);
        let k = s.decide(&m, &head, slo, first).expect("kept");
        assert_eq!((k.th, k.weight), (Some(0), Some(1.0)), "{:?}", k.reason);
        k.reason
    };
    use Reason::*;
    for (outcome, want) in [
        (Outcome::UpstreamError, Error),
        (Outcome::UpstreamTimeout, Error),
        (Outcome::Incomplete, Incomplete),
        (Outcome::ClientCancelled, Cancelled),
        (Outcome::Shutdown, Shutdown),
        (Outcome::Malformed, Malformed),
    ] {
        assert_eq!(reason(&|m| m.outcome = outcome, false, false), want);
    }
    assert_eq!(reason(&|m| m.malformed_events = 1, false, false), Malformed);
    assert_eq!(reason(&|_| {}, true, false), Slo);
    let ttft = |m: &mut Measurement| m.time_to_first_token = Some(Duration::from_millis(2001));
    assert_eq!(reason(&ttft, false, false), SlowTtft);
    let stall = |m: &mut Measurement| m.max_gap = Some(Duration::from_millis(1001));
    assert_eq!(reason(&stall, false, false), Stall);
    let long = |m: &mut Measurement| m.duration = Duration::from_secs(61);
    assert_eq!(reason(&long, false, false), SlowDuration);
    assert_eq!(reason(&|_| {}, false, true), FirstOfPair);
    // At the limit is not over it.
    let mut m = plain.clone();
    m.time_to_first_token = Some(Duration::from_secs(2));
    m.max_gap = Some(Duration::from_secs(1));
    m.duration = Duration::from_secs(60);
    assert_eq!(s.decide(&m, &head, false, false), None);
}

#[test]
fn ordinary_requests_carry_the_ratio_threshold_and_weight() {
    let s = Sampler::new(&cfg(0.25));
    let m = measurement(facts(Some("m"), None, false));
    let kept = s.decide(&m, &s.head(u128::MAX, None), false, false);
    assert_eq!(
        kept,
        Some(Kept {
            reason: Reason::Ratio,
            th: Some(0xc0_0000_0000_0000),
            weight: Some(4.0)
        })
    );
    assert_eq!(s.decide(&m, &s.head(0, None), false, false), None);
    let all = Sampler::default().decide(&m, &Sampler::default().head(0, None), false, false);
    assert_eq!(
        all.map(|k| (k.reason, k.th, k.weight)),
        Some((Reason::All, Some(0), Some(1.0)))
    );
}

#[test]
fn respect_parent_keeps_sampled_remote_parents_only() {
    let s = Sampler::new(&SamplingConfig {
        ratio: 0.0,
        respect_parent: true,
        ..SamplingConfig::default()
    });
    let m = measurement(facts(Some("m"), None, false));
    let on = remote(TraceFlags::SAMPLED, "");
    let k = s
        .decide(&m, &s.head(0, Some(&on)), false, false)
        .expect("kept");
    assert_eq!(
        (k.reason, k.th, k.weight),
        (Reason::Parent, None, None),
        "no th: unknown"
    );
    // A parent `th` consistent with its flag gives the weight.
    let with_th = remote(TraceFlags::SAMPLED, "ot=th:8;rv:90000000000000");
    let k = s
        .decide(&m, &s.head(0, Some(&with_th)), false, false)
        .expect("kept");
    assert_eq!((k.th, k.weight), (Some(0x80_0000_0000_0000), Some(2.0)));
    // An inconsistent one (rv < th) is dropped.
    let bad = remote(TraceFlags::SAMPLED, "ot=th:8;rv:10000000000000");
    assert_eq!(s.head(0, Some(&bad)).parent_th, None);
    let off = remote(TraceFlags::default(), "");
    assert_eq!(s.decide(&m, &s.head(0, Some(&off)), false, false), None);
    let off_rule = Sampler::new(&cfg(0.0));
    assert_eq!(
        off_rule.decide(&m, &off_rule.head(0, Some(&on)), false, false),
        None
    );
}

#[test]
fn the_span_trace_state_gets_th_and_keeps_the_rest() {
    let s: TraceState = "vendor=abc,ot=th:8;rv:90000000000000".parse().expect("ts");
    let out = with_threshold(&s, Some(0xfd70a000000000));
    assert_eq!(out.get("ot"), Some("th:fd70a;rv:90000000000000"));
    assert_eq!(out.get("vendor"), Some("abc"));
    let none = with_threshold(&s, None);
    assert_eq!(none.get("ot"), Some("rv:90000000000000"));
    let bare = with_threshold(&TraceState::default(), Some(0));
    assert_eq!(bare.header(), "ot=th:0");
    let empty = with_threshold(&"ot=th:c".parse().expect("ts"), None);
    assert_eq!(empty.header(), "");
}
