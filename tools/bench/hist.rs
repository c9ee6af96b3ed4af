//! A log-linear latency histogram: nanosecond samples in, percentiles out
//! (128 sub-buckets per power of two, so under 0.8 % relative error), in a
//! fixed 60 KiB whatever the sample count.

const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = (SUB + (64 - SUB_BITS as u64) * SUB) as usize;

/// Counts of nanosecond samples.
#[derive(Clone)]
pub(crate) struct Hist {
    counts: Vec<u64>,
    n: u64,
    max: u64,
    sum: u128,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: vec![0; BUCKETS],
            n: 0,
            max: 0,
            sum: 0,
        }
    }
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hist")
            .field("n", &self.n)
            .field("p50", &self.quantile(0.5))
            .finish()
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let m = (v >> (e - SUB_BITS)) - SUB;
    (SUB + u64::from(e - SUB_BITS) * SUB + m) as usize
}

/// The middle of bucket `i`.
fn value(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let k = i - SUB;
    let shift = (k / SUB) as u32;
    let low = (SUB + k % SUB) << shift;
    low + ((1u64 << shift) >> 1)
}

impl Hist {
    /// Add one sample (nanoseconds).
    pub(crate) fn record(&mut self, ns: u64) {
        self.counts[index(ns)] += 1;
        self.n += 1;
        self.max = self.max.max(ns);
        self.sum += u128::from(ns);
    }

    /// The `q` quantile (0..=1) in nanoseconds; `None` without samples.
    pub(crate) fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((q * self.n as f64).ceil() as u64).clamp(1, self.n);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(value(i).min(self.max));
            }
        }
        Some(self.max)
    }

    /// Largest sample in nanoseconds.
    pub(crate) fn max(&self) -> Option<u64> {
        (self.n > 0).then_some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut last = 0;
        for v in (0..1_000_000u64)
            .step_by(37)
            .chain([u64::MAX / 3, u64::MAX])
        {
            let i = index(v);
            assert!(i >= last, "index must not decrease at {v}");
            last = i;
            let mid = value(i) as f64;
            let err = (mid - v as f64).abs() / (v.max(1) as f64);
            assert!(err <= 0.008 || v < SUB, "bucket of {v} is {mid}: {err}");
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Hist::default();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let p50 = h.quantile(0.5).expect("samples") as f64;
        assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.01, "p50 {p50}");
        assert_eq!(h.quantile(1.0), Some(1_000_000));
        assert_eq!(h.n, 1000);
    }
}
