//! One cell's repeated windows: a ring of `windows` windows, each keeping
//! the figures of up to `samples` of its requests (a uniform sample beyond
//! that); medians are computed when read, never per request.

/// The figures kept per request, in report order: TTFT (ms), prefill
/// tokens/s, decode tokens/s, duration (ms), output tokens. `NaN` = the
/// request has no value for that figure.
pub const FIGURES: usize = 5;

/// One request's figures.
pub type Figures = [f32; FIGURES];

/// Bytes one kept request takes (`FIGURES` `f32`s).
pub const SAMPLE_BYTES: usize = std::mem::size_of::<Figures>();

/// A window's number before it first records (never a live number).
const UNUSED: u64 = u64::MAX;

/// One window: its number (time since the epoch / window length), the
/// requests it saw and those it keeps.
#[derive(Debug)]
struct Window {
    number: u64,
    seen: u64,
    samples: Vec<Figures>,
}

/// The repeated windows of one cell (one side × prompt-size class × load
/// class).
#[derive(Debug)]
pub struct Cell {
    windows: Box<[Window]>,
}

/// Median, smallest and largest of a figure's window medians.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// Median of the window medians.
    pub median: f64,
    /// Smallest window median.
    pub min: f64,
    /// Largest window median.
    pub max: f64,
}

/// What a cell holds now.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Requests seen in the live windows.
    pub requests: u64,
    /// Live windows that saw a request.
    pub windows: usize,
    /// Per figure, over the windows that have a value for it.
    pub figures: [Option<Spread>; FIGURES],
}

impl Cell {
    /// A cell of `windows` (≥ 1) empty windows; no sample buffer yet.
    pub fn new(windows: usize) -> Cell {
        let windows = (0..windows.max(1))
            .map(|_| Window {
                number: UNUSED,
                seen: 0,
                samples: Vec::new(),
            })
            .collect();
        Cell { windows }
    }

    /// Record one request that finished in window `number`, keeping at
    /// most `cap` per window. A window's buffer is reused when its slot
    /// comes round again, so the steady state allocates nothing. A request
    /// older than its slot's window (finished long after it started) is
    /// dropped.
    pub fn record(&mut self, number: u64, figures: Figures, cap: usize) {
        let len = self.windows.len() as u64;
        let w = &mut self.windows[(number % len) as usize];
        if w.number != number {
            if w.number != UNUSED && w.number > number {
                return;
            }
            w.number = number;
            w.seen = 0;
            w.samples.clear();
        }
        w.seen += 1;
        if w.samples.len() < cap {
            if w.samples.len() == w.samples.capacity() {
                // Grow by doubling, never past `cap`.
                let want = (w.samples.len() * 2).clamp(4, cap);
                w.samples.reserve_exact(want - w.samples.len());
            }
            w.samples.push(figures);
        } else {
            // Reservoir sampling (algorithm R): the n-th request replaces
            // a kept one with probability cap / n.
            let j = mix(w.seen ^ number.rotate_left(32)) % w.seen;
            if let Some(slot) = w.samples.get_mut(j as usize) {
                *slot = figures;
            }
        }
    }

    /// The live windows at window `now` (the last `windows` of them, `now`
    /// included): requests, windows with a request, and per figure the
    /// spread of the window medians.
    pub fn summary(&self, now: u64) -> Summary {
        let len = self.windows.len() as u64;
        let live = |w: &&Window| w.number != UNUSED && w.number <= now && w.number + len > now;
        let mut requests = 0;
        let mut windows = 0;
        let mut medians: [Vec<f64>; FIGURES] = Default::default();
        let mut scratch = Vec::new();
        for w in self.windows.iter().filter(live).filter(|w| w.seen > 0) {
            requests += w.seen;
            windows += 1;
            for (i, out) in medians.iter_mut().enumerate() {
                scratch.clear();
                scratch.extend(w.samples.iter().map(|s| f64::from(s[i])));
                if let Some(m) = median(&mut scratch) {
                    out.push(m);
                }
            }
        }
        let figures = std::array::from_fn(|i| spread(&mut medians[i]));
        Summary {
            requests,
            windows,
            figures,
        }
    }

    /// Bytes this cell's sample buffers hold now.
    pub fn sample_bytes(&self) -> usize {
        self.windows
            .iter()
            .map(|w| w.samples.capacity() * SAMPLE_BYTES)
            .sum()
    }
}

/// The median of the values that are not `NaN` (the mean of the middle two
/// for an even count); `None` when there are none. Reorders `v`.
pub fn median(v: &mut Vec<f64>) -> Option<f64> {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return None;
    }
    v.sort_unstable_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// Median, min and max of `v`; `None` when empty.
fn spread(v: &mut Vec<f64>) -> Option<Spread> {
    let median = median(v)?;
    Some(Spread {
        median,
        min: v[0],
        max: v[v.len() - 1],
    })
}

/// SplitMix64's finaliser: a well-spread pseudo-random number from `x`.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(v: f32) -> Figures {
        [v, v * 10.0, f32::NAN, v, 1.0]
    }

    #[test]
    fn medians_odd_even_and_without_nan() {
        assert_eq!(median(&mut vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&mut vec![f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(&mut vec![f64::NAN]), None);
        assert_eq!(median(&mut vec![]), None);
    }

    #[test]
    fn summary_is_the_median_of_window_medians_with_their_spread() {
        let mut c = Cell::new(4);
        // Window 0: 1, 2, 3 (median 2); window 1: 10 (median 10);
        // window 2: 4, 6 (median 5).
        for (n, v) in [(0, 1.0), (0, 2.0), (0, 3.0), (1, 10.0), (2, 4.0), (2, 6.0)] {
            c.record(n, one(v), 64);
        }
        let s = c.summary(2);
        assert_eq!((s.requests, s.windows), (6, 3));
        let ttft = s.figures[0].expect("ttft");
        assert_eq!((ttft.median, ttft.min, ttft.max), (5.0, 2.0, 10.0));
        assert_eq!(s.figures[1].map(|s| s.median), Some(50.0));
        assert_eq!(s.figures[2], None, "no request had that figure");
    }

    #[test]
    fn windows_rotate_out_and_slots_are_reused() {
        let mut c = Cell::new(3);
        c.record(0, one(1.0), 8);
        c.record(1, one(2.0), 8);
        c.record(2, one(3.0), 8);
        assert_eq!(c.summary(2).windows, 3);
        assert_eq!(c.summary(3).windows, 2, "window 0 has aged out at 3");
        assert_eq!(c.summary(5).windows, 0, "all aged out");
        // Window 3 takes window 0's slot and starts empty.
        c.record(3, one(7.0), 8);
        c.record(3, one(9.0), 8);
        let s = c.summary(3);
        assert_eq!((s.requests, s.windows), (4, 3));
        assert_eq!(s.figures[0].map(|f| f.max), Some(8.0), "window 3 median");
        // A straggler for window 0, whose slot window 3 now holds: dropped.
        c.record(0, one(100.0), 8);
        assert_eq!(c.summary(3).requests, 4);
        // Reading before a window: it does not count yet.
        assert_eq!(c.summary(2).windows, 2);
    }

    #[test]
    fn samples_are_capped_and_stay_uniform() {
        let mut c = Cell::new(1);
        let cap = 64;
        for i in 0..10_000u32 {
            c.record(0, one(i as f32), cap);
        }
        let s = c.summary(0);
        assert_eq!(s.requests, 10_000, "every request is counted");
        assert!(
            c.sample_bytes() <= cap * SAMPLE_BYTES,
            "{} bytes kept for a cap of {cap}",
            c.sample_bytes()
        );
        let m = s.figures[0].expect("median").median;
        assert!(
            (3000.0..7000.0).contains(&m),
            "a uniform sample of 0..10000 has its median near 5000: {m}"
        );
    }

    #[test]
    fn memory_is_bounded_by_windows_and_samples() {
        let (windows, cap) = (12, 64);
        let mut c = Cell::new(windows);
        for n in 0..100u64 {
            for i in 0..200 {
                c.record(n, one(i as f32), cap);
            }
        }
        assert_eq!(c.sample_bytes(), windows * cap * SAMPLE_BYTES);
        assert_eq!(SAMPLE_BYTES, 20);
    }
}
