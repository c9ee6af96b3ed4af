//! Unit tests of `instruments`: its own code in, assertions out.

use super::*;

#[test]
fn finish_rows_have_unique_names_and_a_measure_shares_its_buckets() {
    let names: std::collections::HashSet<_> = FINISH.iter().map(|r| r.name).collect();
    assert_eq!(names.len(), FINISH.len(), "one row per instrument");
    for row in &FINISH {
        assert_eq!(
            row.buckets.is_empty(),
            row.kind == Kind::Counter,
            "{}: histograms have buckets, counters none",
            row.name
        );
        if let Some(m) = row.exemplar {
            assert_eq!(row.kind, Kind::Histogram, "{}", row.name);
            assert_eq!(
                row.buckets,
                measure_bounds(m),
                "{}: the rows of one exemplar measure share buckets",
                row.name
            );
        }
    }
}

#[test]
fn exemplars_are_kept_for_the_first_sets_only_within_a_fixed_budget() {
    use opentelemetry::metrics::MeterProvider as _;
    let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder().build();
    let ins = Instruments::new(&provider.meter("t"), Semconv::Latest, None, 2);
    let mark = TraceMark {
        trace_id: 7,
        time: std::time::SystemTime::UNIX_EPOCH,
    };
    let r = FinishRecord {
        duration: 1.0,
        ttft: Some(0.2),
        decode_tps: Some(30.0),
        max_stall: Some(0.05),
        trace: Some(mark),
        ..FinishRecord::default()
    };
    let sets: Vec<[KeyValue; 1]> = (0..3).map(|i| [KeyValue::new("s", i)]).collect();
    for attrs in &sets {
        let a = FinishAttrs {
            all: attrs,
            sized: attrs,
            loaded: attrs,
            begin: attrs,
        };
        ins.record_finish(&a, &r);
    }
    let snap = ins.exemplars();
    for (i, attrs) in sets.iter().enumerate() {
        let got = snap.get(M_SERVER_TTFT, attrs);
        assert_eq!(got.is_some(), i < 2, "set {i} of a budget of 2: {got:?}");
    }
    let both = snap.get(M_SERVER_REQUEST_DURATION, &sets[0]);
    assert_eq!(
        both,
        snap.get(M_INFERENCE_DURATION, &sets[0]),
        "both duration histograms share one measure"
    );
    // The most one set can hold: every bucket of every measure.
    let measures = [
        Measure::Duration,
        Measure::Ttft,
        Measure::DecodeTps,
        Measure::MaxStall,
    ];
    let slots: usize = measures.iter().map(|&m| measure_bounds(m).len() + 1).sum();
    let full = SeriesExemplars::<MEASURES>::default();
    for (i, &m) in measures.iter().enumerate() {
        assert_eq!(i, m as usize, "measures in index order");
        let bounds = measure_bounds(m);
        for b in bounds.iter().chain([&f64::MAX]) {
            full.offer(i, bounds, *b, mark);
        }
    }
    assert_eq!(full.read(1).map(|b| b.iter().flatten().count()), Some(17));
    assert_eq!(full.slot_bytes(), slots * 40);
    assert!(
        full.slot_bytes() <= 2600,
        "{} bytes per series",
        full.slot_bytes()
    );
    let _ = provider.shutdown();
}

/// Every data point of a collection as (name, attributes, count or
/// value, sum), sorted: what two ways of recording must agree on.
fn points(exporter: &opentelemetry_sdk::metrics::InMemoryMetricExporter) -> Vec<String> {
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    let mut out = Vec::new();
    let all = exporter.get_finished_metrics().expect("in-memory metrics");
    let Some(rm) = all.last() else { return out };
    for m in rm.scope_metrics().flat_map(|s| s.metrics()) {
        let mut add = |attrs: Vec<String>, v: String| {
            out.push(format!("{} {:?} {v}", m.name(), attrs));
        };
        let sorted = |a: &mut dyn Iterator<Item = &KeyValue>| {
            let mut v: Vec<String> = a.map(|kv| format!("{}={}", kv.key, kv.value)).collect();
            v.sort();
            v
        };
        match m.data() {
            AggregatedMetrics::F64(MetricData::Histogram(h)) => h.data_points().for_each(|p| {
                add(
                    sorted(&mut p.attributes()),
                    format!("{} {:.6}", p.count(), p.sum()),
                );
            }),
            AggregatedMetrics::U64(MetricData::Histogram(h)) => h.data_points().for_each(|p| {
                add(
                    sorted(&mut p.attributes()),
                    format!("{} {}", p.count(), p.sum()),
                );
            }),
            AggregatedMetrics::U64(MetricData::Sum(c)) => c.data_points().for_each(|p| {
                add(sorted(&mut p.attributes()), p.value().to_string());
            }),
            AggregatedMetrics::F64(MetricData::Sum(c)) => c.data_points().for_each(|p| {
                add(sorted(&mut p.attributes()), p.value().to_string());
            }),
            _ => {}
        }
    }
    out.sort();
    out
}

#[test]
fn unbound_records_match_bound_ones_under_every_semconv() {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    // The class follows from the operation name, as in `record_metrics`.
    let ops = [
        (OpClass::Inference, "chat"),
        (OpClass::Embeddings, "embeddings"),
        (OpClass::Unknown, OPERATION_UNKNOWN),
    ];
    let sets = ops.map(|(_, op)| {
        [
            KeyValue::new(GEN_AI_OPERATION_NAME, op),
            KeyValue::new(ROUTE, "r"),
        ]
    });
    let records = ops.map(|(class, _)| FinishRecord {
        class,
        duration: 0.5,
        first_chunk: Some(0.1),
        input_tokens: Some(12),
        output_tokens: Some(3),
        cache_read_tokens: (class == OpClass::Inference).then_some(4),
        request_overhead: Some(0.0002),
        pool_wait: (class == OpClass::Inference).then_some(0.003),
        cost: Some(match class {
            OpClass::Inference => CostRecord::Priced {
                usd: 0.25,
                source: CostSource::Table,
                estimated: false,
            },
            OpClass::Embeddings => CostRecord::Priced {
                usd: 0.5,
                source: CostSource::Provider,
                estimated: true,
            },
            OpClass::Unknown => CostRecord::Unpriced,
        }),
        ..FinishRecord::default()
    });
    for semconv in [Semconv::Latest, Semconv::Legacy, Semconv::Both] {
        let [bound, unbound] = [true, false].map(|bound| {
            let exporter = InMemoryMetricExporter::default();
            let provider = SdkMeterProvider::builder()
                .with_reader(PeriodicReader::builder(exporter.clone()).build())
                .build();
            let ins = Instruments::new(&provider.meter("t"), semconv, None, 0);
            for (attrs, r) in sets.iter().zip(&records) {
                let a = FinishAttrs {
                    all: attrs,
                    sized: attrs,
                    loaded: attrs,
                    begin: &attrs[1..],
                };
                match bound {
                    true => ins.record_finish(&a, r),
                    false => ins.record_unbound(&a, r),
                }
            }
            provider.force_flush().expect("flush");
            let got = points(&exporter);
            let _ = provider.shutdown();
            got
        });
        assert!(!bound.is_empty(), "{semconv:?}: something recorded");
        for name in [M_COST, M_COST_UNPRICED, M_PROXY_OVERHEAD] {
            assert!(
                bound.iter().any(|p| p.starts_with(&format!("{name} "))),
                "{semconv:?}: {name} recorded: {bound:?}"
            );
        }
        assert_eq!(bound, unbound, "{semconv:?}");
    }
}

/// `streams_active` per (route, provider) after `run`, as "route/provider value".
fn active_points(run: impl FnOnce(&Instruments)) -> Vec<String> {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(exporter.clone()).build())
        .build();
    let ins = Instruments::new(&provider.meter("t"), Semconv::Latest, None, 0);
    run(&ins);
    provider.force_flush().expect("flush");
    let mut out = Vec::new();
    let all = exporter.get_finished_metrics().expect("in-memory metrics");
    for m in all
        .iter()
        .flat_map(|rm| rm.scope_metrics())
        .flat_map(|s| s.metrics())
    {
        if let (M_STREAMS_ACTIVE, AggregatedMetrics::I64(MetricData::Sum(c))) = (m.name(), m.data())
        {
            for p in c.data_points() {
                let mut kv: Vec<_> = p.attributes().collect();
                kv.sort_by_key(|kv| kv.key.as_str() != ROUTE);
                let v: Vec<String> = kv.iter().map(|kv| kv.value.to_string()).collect();
                out.push(format!("{} {}", v.join("/"), p.value()));
            }
        }
    }
    out.sort();
    let _ = provider.shutdown();
    out
}

#[test]
fn active_requests_count_per_route_and_provider_bound_or_not() {
    let set = |route: &str, provider: &'static str| {
        [
            KeyValue::new(ROUTE, route.to_owned()),
            KeyValue::new(GEN_AI_PROVIDER_NAME, provider),
        ]
    };
    let got = active_points(|ins| {
        let a = ins.active_start(set("r", "openai"));
        let mut b = ins.active_start(set("r", "openai"));
        let c = ins.active_start(set("s", "openai"));
        assert!(
            a.bound.is_some() && b.bound.is_some(),
            "bound under the cap"
        );
        b.relabel(ins, KeyValue::new(GEN_AI_PROVIDER_NAME, "anthropic"));
        drop(c);
        std::mem::forget(a);
        std::mem::forget(b);
    });
    assert_eq!(got, ["r/anthropic 1", "r/openai 1", "s/openai 0"]);
    // Past the cap of bound sets, the same counts through unbound adds.
    let got = active_points(|ins| {
        let held: Vec<ActiveRequest> = (0..MAX_ACTIVE_SETS)
            .map(|i| ins.active_start(set(&format!("r{i}"), "openai")))
            .collect();
        let mut past = ins.active_start(set("past", "openai"));
        assert!(past.bound.is_none(), "unbound past the cap");
        let again = ins.active_start(set("past", "openai"));
        past.relabel(ins, KeyValue::new(GEN_AI_PROVIDER_NAME, "gemini"));
        drop(again);
        std::mem::forget(past);
        drop(held);
    });
    let past: Vec<&String> = got.iter().filter(|p| p.starts_with("past/")).collect();
    assert_eq!(past, ["past/gemini 1", "past/openai 0"]);
    assert_eq!(
        got.iter().filter(|p| p.ends_with(" 0")).count(),
        MAX_ACTIVE_SETS + 1
    );
}

#[test]
fn gap_cells_are_the_union_of_both_histograms_boundaries() {
    let mut union: Vec<f64> = GAP_BUCKETS
        .iter()
        .chain(&DURATION_BUCKETS)
        .copied()
        .collect();
    union.sort_by(f64::total_cmp);
    union.dedup();
    assert_eq!(union, GAP_CELL_BOUNDS.to_vec());
}

/// What a histogram with `bounds` holds after the given records.
fn histogram(bounds: &[f64], values: &[f64]) -> (Vec<u64>, u64, f64, f64, f64) {
    let mut counts = vec![0u64; bounds.len() + 1];
    for v in values {
        counts[bounds.partition_point(|&b| b < *v)] += 1;
    }
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (counts, values.len() as u64, values.iter().sum(), min, max)
}

#[test]
fn replayed_gaps_fill_both_histograms_as_recording_each_would() {
    let mut rng = fastrand::Rng::with_seed(7);
    let mut cases: Vec<Vec<Duration>> = vec![
        vec![Duration::from_millis(5); 3], // on a boundary
        vec![Duration::from_millis(3)],
        vec![Duration::ZERO, Duration::from_secs(100)],
        (1..=40).map(Duration::from_millis).collect(),
    ];
    for _ in 0..50 {
        let n = rng.usize(1..200);
        cases.push(
            (0..n)
                .map(|_| Duration::from_nanos(rng.u64(0..3_000_000_000) >> rng.u32(0..20)))
                .collect(),
        );
    }
    for gaps in cases {
        let mut tally = GapTally::default();
        gaps.iter().for_each(|g| tally.add(*g));
        let mut replayed = Vec::new();
        tally.replay(|v| replayed.push(v));
        let each: Vec<f64> = gaps.iter().map(Duration::as_secs_f64).collect();
        for bounds in [&GAP_BUCKETS[..], &DURATION_BUCKETS[..]] {
            let (want, got) = (histogram(bounds, &each), histogram(bounds, &replayed));
            assert_eq!(
                (&want.0, want.1, want.3, want.4),
                (&got.0, got.1, got.3, got.4),
                "{gaps:?}"
            );
            assert!(
                (want.2 - got.2).abs() <= 1e-9 * want.2.max(1.0),
                "sum {} vs {}",
                want.2,
                got.2
            );
        }
    }
    let mut none = Vec::new();
    GapTally::default().replay(|v| none.push(v));
    assert!(none.is_empty(), "nothing folded, nothing recorded");
}
