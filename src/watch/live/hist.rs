//! Log-scale histograms: positive values in, quantiles within a fixed
//! relative error out.
//!
//! Bin `i` covers `[MIN·γ^i, MIN·γ^(i+1))` with γ = 1.1, so a quantile is
//! reported as the bin's geometric midpoint, within ±5 % of the true value
//! (and clamped to the observed min/max, which makes single values exact).
//! One scale serves seconds (TTFT, stalls) and rates (tokens/s).

/// Growth factor between bin edges.
const GAMMA: f64 = 1.1;
/// Lower edge of bin 0; smaller values (and zero) land in bin 0.
const MIN: f64 = 1e-3;
/// Bins from `MIN` to 1e6 (9 decades); larger values land in the last bin.
pub(super) const BINS: usize = 218;

/// Largest relative error of a reported quantile (half a bin, geometric).
pub const RELATIVE_ERROR: f64 = 0.049;

fn bin_of(v: f64) -> usize {
    if v.is_nan() || v <= MIN {
        return 0;
    }
    let i = ((v / MIN).ln() / GAMMA.ln()).floor();
    (i as usize).min(BINS - 1)
}

fn midpoint(bin: usize) -> f64 {
    MIN * GAMMA.powf(bin as f64 + 0.5)
}

/// A histogram for one time bucket: only the bins between the lowest and
/// highest value seen are stored, so a bucket of similar values stays small;
/// the worst case is `BINS` counters.
#[derive(Debug, Clone, Default)]
pub struct LogHist {
    lo: u16,
    counts: Vec<u32>,
    min: f64,
    max: f64,
}

impl LogHist {
    /// Add one value (NaN and negative values are ignored).
    pub fn record(&mut self, v: f64) {
        if !v.is_finite() || v < 0.0 {
            return;
        }
        let bin = bin_of(v);
        if self.counts.is_empty() {
            self.lo = bin as u16;
            self.counts.push(1);
            (self.min, self.max) = (v, v);
            return;
        }
        let lo = usize::from(self.lo);
        if bin < lo {
            self.counts.splice(0..0, std::iter::repeat_n(0, lo - bin));
            self.lo = bin as u16;
        } else if bin >= lo + self.counts.len() {
            self.counts.resize(bin - lo + 1, 0);
        }
        let slot = &mut self.counts[bin - usize::from(self.lo)];
        *slot = slot.saturating_add(1);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Whether no value was recorded.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// Several `LogHist`s merged: a distribution to read quantiles from.
#[derive(Debug, Clone)]
pub struct Distribution {
    counts: Box<[u64; BINS]>,
    total: u64,
    min: f64,
    max: f64,
}

impl Default for Distribution {
    fn default() -> Self {
        Distribution {
            counts: Box::new([0; BINS]),
            total: 0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Distribution {
    /// Fold one bucket's histogram in.
    pub fn merge(&mut self, h: &LogHist) {
        if h.is_empty() {
            return;
        }
        let lo = usize::from(h.lo);
        for (i, c) in h.counts.iter().enumerate() {
            self.counts[lo + i] += u64::from(*c);
            self.total += u64::from(*c);
        }
        self.min = self.min.min(h.min);
        self.max = self.max.max(h.max);
    }

    /// Number of values.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Smallest value seen (exact).
    pub fn min(&self) -> Option<f64> {
        (self.total > 0).then_some(self.min)
    }

    /// Largest value seen (exact).
    pub fn max(&self) -> Option<f64> {
        (self.total > 0).then_some(self.max)
    }

    /// The `q`-quantile (0 ≤ q ≤ 1, nearest rank), within
    /// [`RELATIVE_ERROR`]; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.total == 0 {
            return None;
        }
        let q = q.clamp(0.0, 1.0);
        let rank = ((q * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bin, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                // The edge bins also hold everything beyond the scale.
                return Some(match bin {
                    0 => self.min,
                    b if b == BINS - 1 => self.max,
                    b => midpoint(b).clamp(self.min, self.max),
                });
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dist(values: impl IntoIterator<Item = f64>) -> Distribution {
        let mut h = LogHist::default();
        values.into_iter().for_each(|v| h.record(v));
        let mut d = Distribution::default();
        d.merge(&h);
        d
    }

    fn assert_close(got: Option<f64>, want: f64, what: &str) {
        let got = got.unwrap_or_else(|| panic!("{what}: expected {want}, got None"));
        let err = (got - want).abs() / want;
        assert!(
            err <= RELATIVE_ERROR,
            "{what}: expected {want} within {RELATIVE_ERROR}, got {got} (error {err:.3})"
        );
    }

    #[test]
    fn quantiles_within_resolution() {
        // 1..=1000 ms: p50 = 0.5 s, p95 = 0.95 s, p5 = 0.05 s.
        let d = dist((1..=1000).map(|ms| f64::from(ms) / 1000.0));
        assert_eq!(d.count(), 1000, "all values counted");
        assert_close(d.quantile(0.5), 0.5, "p50 of 1..=1000 ms");
        assert_close(d.quantile(0.95), 0.95, "p95 of 1..=1000 ms");
        assert_close(d.quantile(0.05), 0.05, "p5 of 1..=1000 ms");
        assert_eq!(d.min(), Some(0.001), "min is exact");
        assert_eq!(d.max(), Some(1.0), "max is exact");
    }

    #[test]
    fn single_value_is_exact() {
        let d = dist([42.0]);
        assert_eq!(
            d.quantile(0.5),
            Some(42.0),
            "one value: every quantile is it"
        );
        assert_eq!(d.quantile(0.05), Some(42.0));
    }

    #[test]
    fn rates_across_decades() {
        let d = dist((0..100).map(|i| if i < 90 { 80.0 } else { 8.0 }));
        assert_close(d.quantile(0.5), 80.0, "p50 of mostly 80 tok/s");
        assert_close(d.quantile(0.05), 8.0, "p5 picks the slow 10 %");
    }

    #[test]
    fn growing_downwards_and_merging() {
        let mut a = LogHist::default();
        a.record(10.0);
        a.record(0.01); // extends the stored range below
        a.record(500.0); // and above
        let mut b = LogHist::default();
        b.record(1.0);
        let mut d = Distribution::default();
        d.merge(&a);
        d.merge(&b);
        assert_eq!(d.count(), 4, "merged counts");
        assert_eq!(d.min(), Some(0.01));
        assert_eq!(d.max(), Some(500.0));
        assert_close(d.quantile(0.5), 1.0, "median of 0.01, 1, 10, 500");
    }

    #[test]
    fn out_of_range_values_clamp_to_edge_bins() {
        let d = dist([0.0, 1e9, f64::NAN, -1.0]);
        assert_eq!(d.count(), 2, "NaN and negative values ignored");
        assert_eq!(d.quantile(0.0), Some(0.0), "zero kept as min");
        assert_eq!(d.quantile(1.0), Some(1e9), "huge value kept as max");
    }

    #[test]
    fn empty_has_no_quantiles() {
        let d = Distribution::default();
        assert_eq!(d.quantile(0.5), None);
        assert_eq!(d.min(), None);
    }
}
