//! Exemplars: a finished request's value, trace id and end time in; per
//! series, measure and histogram bucket, the latest of them out (for the
//! OpenMetrics `/metrics`, which opentelemetry_sdk 0.33 gives none).
//!
//! A bucket's exemplar lives in one fixed slot of atomics written as a
//! sequence lock: the request path takes no lock and allocates nothing
//! (slots are allocated once per series and measure, on its first record),
//! and a writer that finds the slot busy skips it: a concurrent writer is
//! storing an equally recent exemplar.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;

/// The trace behind one measurement: id and wall-clock end time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TraceMark {
    /// Big-endian trace id, never zero.
    pub trace_id: u128,
    pub time: SystemTime,
}

impl TraceMark {
    /// A mark for an exported span's trace id; `None` for an invalid one.
    /// Only call it for a span that is exported: another would lead
    /// nowhere.
    pub(crate) fn new(
        span: &opentelemetry::trace::SpanContext,
        time: SystemTime,
    ) -> Option<TraceMark> {
        let trace_id = u128::from_be_bytes(span.trace_id().to_bytes());
        (span.is_valid() && trace_id != 0).then_some(TraceMark { trace_id, time })
    }
}

/// One exemplar read back from a slot.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Kept {
    pub trace_id: [u8; 16],
    pub value: f64,
    pub time: SystemTime,
}

/// One bucket's latest exemplar. `seq` is even when the slot is stable,
/// odd while a writer stores, and 0 until the first store.
#[derive(Debug, Default)]
struct Slot {
    seq: AtomicU64,
    trace_hi: AtomicU64,
    trace_lo: AtomicU64,
    value: AtomicU64,
    /// Milliseconds since the Unix epoch.
    time_ms: AtomicU64,
}

/// Readers retry a torn read this many times, then report nothing.
const READ_TRIES: usize = 8;

impl Slot {
    fn store(&self, mark: TraceMark, value: f64) {
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & 1 == 1
            || self
                .seq
                .compare_exchange(seq, seq + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        // Orders the odd `seq` before the data: a reader that sees any of
        // the new data then sees `seq` changed and retries.
        fence(Ordering::Release);
        let ms = mark
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self.trace_hi
            .store((mark.trace_id >> 64) as u64, Ordering::Relaxed);
        self.trace_lo.store(mark.trace_id as u64, Ordering::Relaxed);
        self.value.store(value.to_bits(), Ordering::Relaxed);
        self.time_ms.store(ms, Ordering::Relaxed);
        self.seq.store(seq + 2, Ordering::Release);
    }

    fn load(&self) -> Option<Kept> {
        for _ in 0..READ_TRIES {
            let before = self.seq.load(Ordering::Acquire);
            if before == 0 {
                return None;
            }
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let hi = self.trace_hi.load(Ordering::Relaxed);
            let lo = self.trace_lo.load(Ordering::Relaxed);
            let value = self.value.load(Ordering::Relaxed);
            let ms = self.time_ms.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.seq.load(Ordering::Relaxed) == before {
                let id = (u128::from(hi) << 64) | u128::from(lo);
                return Some(Kept {
                    trace_id: id.to_be_bytes(),
                    value: f64::from_bits(value),
                    time: SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
                });
            }
        }
        None
    }
}

/// The bucket a value falls in, by the SDK's rule (a value on a boundary
/// belongs to the bucket it bounds); `bounds.len()` is `+Inf`.
pub(crate) fn bucket_of(bounds: &[f64], value: f64) -> usize {
    bounds.partition_point(|&b| b < value)
}

/// One series' exemplars for `N` measures, each a histogram with its own
/// bounds: a slot per bucket, allocated on the measure's first exemplar.
#[derive(Debug)]
pub(crate) struct SeriesExemplars<const N: usize> {
    measures: [OnceLock<Box<[Slot]>>; N],
}

impl<const N: usize> Default for SeriesExemplars<N> {
    fn default() -> Self {
        SeriesExemplars {
            measures: std::array::from_fn(|_| OnceLock::new()),
        }
    }
}

impl<const N: usize> SeriesExemplars<N> {
    /// Keep `value` as measure `i`'s latest exemplar in its bucket of
    /// `bounds` (the same bounds on every call for one `i`).
    pub(crate) fn offer(&self, i: usize, bounds: &[f64], value: f64, mark: TraceMark) {
        let Some(cell) = self.measures.get(i) else {
            return;
        };
        if !value.is_finite() {
            return;
        }
        let slots = cell.get_or_init(|| (0..=bounds.len()).map(|_| Slot::default()).collect());
        if let Some(slot) = slots.get(bucket_of(bounds, value)) {
            slot.store(mark, value);
        }
    }

    /// Measure `i`'s exemplars, one entry per bucket (`+Inf` last); `None`
    /// when it never had one.
    pub(crate) fn read(&self, i: usize) -> Option<Vec<Option<Kept>>> {
        let slots = self.measures.get(i)?.get()?;
        Some(slots.iter().map(Slot::load).collect())
    }

    /// Bytes held by allocated slots (for the memory bound's test).
    #[cfg(test)]
    pub(crate) fn slot_bytes(&self) -> usize {
        self.measures
            .iter()
            .filter_map(OnceLock::get)
            .map(|s| s.len() * std::mem::size_of::<Slot>())
            .sum()
    }
}

/// Every kept exemplar at one moment, by series attributes and instrument
/// name, one entry per bucket (`+Inf` last).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    series: HashMap<Vec<KeyValue>, Vec<(&'static str, Buckets)>>,
    /// Instruments with any exemplar, so the others skip the lookup.
    instruments: Vec<&'static str>,
}

/// One histogram's kept exemplars, per bucket (`+Inf` last).
type Buckets = Vec<Option<Kept>>;

impl Snapshot {
    /// Add `buckets` for `instrument` on the series `attrs` (any order).
    pub(crate) fn insert(
        &mut self,
        attrs: &[KeyValue],
        instrument: &'static str,
        buckets: Buckets,
    ) {
        let per = self.series.entry(sorted(attrs)).or_default();
        // Several bound sets can share one series (they differ in an
        // attribute this instrument lacks): keep the latest per bucket.
        match per
            .iter_mut()
            .find(|(name, b)| *name == instrument && b.len() == buckets.len())
        {
            Some((_, have)) => {
                for (h, n) in have.iter_mut().zip(buckets) {
                    if n.is_some_and(|n| h.is_none_or(|h| n.time > h.time)) {
                        *h = n;
                    }
                }
            }
            None => per.push((instrument, buckets)),
        }
        if !self.instruments.contains(&instrument) {
            self.instruments.push(instrument);
        }
    }

    /// `instrument`'s exemplars on the series `attrs` (any order).
    pub(crate) fn get(&self, instrument: &str, attrs: &[KeyValue]) -> Option<&[Option<Kept>]> {
        if !self.has(instrument) {
            return None;
        }
        let per = self.series.get(&sorted(attrs))?;
        per.iter()
            .find(|(name, _)| *name == instrument)
            .map(|(_, b)| b.as_slice())
    }

    /// Whether `instrument` has any exemplar.
    pub(crate) fn has(&self, instrument: &str) -> bool {
        self.instruments.contains(&instrument)
    }

    /// Whether no exemplar was kept.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.series.is_empty()
    }
}

/// Attributes in the SDK's canonical order (by key), as data points carry them.
fn sorted(attrs: &[KeyValue]) -> Vec<KeyValue> {
    let mut v = attrs.to_vec();
    v.sort_by(|a, b| a.key.cmp(&b.key));
    v
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests build timestamps freely")]
mod tests {
    use std::sync::Arc;

    use super::*;

    const BOUNDS: [f64; 3] = [0.1, 1.0, 10.0];

    fn mark(id: u128, secs: u64) -> TraceMark {
        TraceMark {
            trace_id: id,
            time: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        }
    }

    #[test]
    fn latest_value_per_bucket_is_kept() {
        let ex = SeriesExemplars::<2>::default();
        assert_eq!(ex.read(0), None, "no slots before the first exemplar");
        ex.offer(0, &BOUNDS, 0.05, mark(1, 10));
        ex.offer(0, &BOUNDS, 0.5, mark(2, 11));
        ex.offer(0, &BOUNDS, 0.7, mark(3, 12));
        ex.offer(0, &BOUNDS, 1.0, mark(4, 13)); // on a bound: the bucket it bounds
        ex.offer(0, &BOUNDS, 99.0, mark(5, 14));
        let got = ex.read(0).expect("measure 0 has exemplars");
        let ids: Vec<Option<u8>> = got.iter().map(|k| k.map(|k| k.trace_id[15])).collect();
        assert_eq!(ids, [Some(1), Some(4), None, Some(5)], "{got:?}");
        let second = got[1].expect("bucket le=1");
        assert_eq!(second.value, 1.0);
        assert_eq!(
            second.time,
            SystemTime::UNIX_EPOCH + Duration::from_secs(13)
        );
        assert_eq!(ex.read(1), None, "measure 1 never offered");
        assert_eq!(ex.read(7), None, "no such measure");
    }

    #[test]
    fn slots_are_allocated_per_measure_on_first_use() {
        let ex = SeriesExemplars::<3>::default();
        assert_eq!(ex.slot_bytes(), 0, "nothing before the first exemplar");
        ex.offer(1, &BOUNDS, 0.5, mark(1, 1));
        ex.offer(1, &BOUNDS, 5.0, mark(2, 1));
        assert_eq!(
            ex.slot_bytes(),
            4 * 40,
            "one measure: 3 bounds + +Inf, 40 bytes each"
        );
    }

    #[test]
    fn snapshot_finds_a_series_in_any_attribute_order() {
        let a = [KeyValue::new("b", "2"), KeyValue::new("a", "1")];
        let b = [KeyValue::new("a", "1"), KeyValue::new("b", "2")];
        let k = Kept {
            trace_id: [1; 16],
            value: 1.0,
            time: SystemTime::UNIX_EPOCH,
        };
        let mut snap = Snapshot::default();
        assert!(snap.is_empty());
        snap.insert(&a, "h", vec![None, Some(k)]);
        assert_eq!(snap.get("h", &b), Some(&[None, Some(k)][..]));
        assert_eq!(snap.get("other", &b), None, "another instrument");
        assert_eq!(snap.get("h", &b[..1]), None, "another series");
    }

    #[test]
    fn trace_id_round_trips_big_endian() {
        let id = 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128;
        let ex = SeriesExemplars::<1>::default();
        ex.offer(0, &BOUNDS, 5.0, mark(id, 1));
        let k = ex.read(0).expect("read")[2].expect("bucket le=10");
        assert_eq!(k.trace_id, id.to_be_bytes());
        assert_eq!(k.trace_id[0], 0x4b, "most significant byte first");
    }

    #[test]
    fn non_finite_values_are_not_kept() {
        let ex = SeriesExemplars::<1>::default();
        ex.offer(0, &BOUNDS, f64::NAN, mark(1, 1));
        ex.offer(0, &BOUNDS, f64::INFINITY, mark(1, 1));
        assert_eq!(ex.read(0), None);
    }

    #[test]
    fn invalid_spans_give_no_mark() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        let cx = |flags| {
            SpanContext::new(
                TraceId::from(7u128),
                SpanId::from(9u64),
                flags,
                false,
                TraceState::default(),
            )
        };
        let now = SystemTime::UNIX_EPOCH;
        assert!(TraceMark::new(&cx(TraceFlags::SAMPLED), now).is_some());
        assert!(
            TraceMark::new(&cx(TraceFlags::default()), now).is_some(),
            "the flag sent upstream does not decide export; the caller does"
        );
        assert!(TraceMark::new(&SpanContext::empty_context(), now).is_none());
    }

    /// Writers racing on one slot never leave a torn exemplar: every value
    /// read back carries the trace id written with it.
    #[test]
    fn concurrent_writers_never_tear_a_slot() {
        let ex = Arc::new(SeriesExemplars::<1>::default());
        let writers: Vec<_> = (1..=4u64)
            .map(|t| {
                let ex = ex.clone();
                std::thread::spawn(move || {
                    for i in 1..=20_000u64 {
                        let v = (t * 1_000_000 + i) as f64;
                        ex.offer(0, &[], v, mark(u128::from(t * 1_000_000 + i), i));
                    }
                })
            })
            .collect();
        let mut seen = 0;
        while !writers.iter().all(std::thread::JoinHandle::is_finished) {
            if let Some(Some(k)) = ex.read(0).map(|v| v[0]) {
                assert_eq!(
                    u128::from_be_bytes(k.trace_id),
                    k.value as u128,
                    "torn exemplar: {k:?}"
                );
                seen += 1;
            }
        }
        for w in writers {
            w.join().expect("writer");
        }
        let last = ex.read(0).expect("read")[0].expect("kept");
        assert_eq!(u128::from_be_bytes(last.trace_id), last.value as u128);
        let _ = seen;
    }
}
