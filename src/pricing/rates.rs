//! Billing arithmetic: a model's per-million-token rates and a request's
//! token counts in; its cost in USD out, with each token billed once.
//!
//! Counts are totals, as the providers' usage normalised by the adapters
//! states them: `input` includes cached and audio input, `cache_write`
//! includes its 5-minute and 1-hour parts, `output` includes reasoning and
//! audio output. A more specific unit that has its own rate takes its tokens
//! out of every broader unit it belongs to; one without a rate leaves them
//! there (audio input without an audio rate is billed as input). This is the
//! decomposition genai-prices defines for its price keys.

/// One billable kind of token, from broad to specific.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// All input tokens (uncached text once the rest is taken out).
    Input,
    /// Input read from the prompt cache.
    CacheRead,
    /// Input written to the prompt cache (5-minute rate unless split).
    CacheWrite,
    /// Cache writes kept for 5 minutes (Anthropic), where priced apart.
    CacheWrite5m,
    /// Cache writes kept for 1 hour (Anthropic).
    CacheWrite1h,
    /// Audio input.
    InputAudio,
    /// Audio input read from the prompt cache.
    CacheAudioRead,
    /// All output tokens (reasoning and audio included).
    Output,
    /// Audio output.
    OutputAudio,
    /// Reasoning output, where priced apart from output.
    OutputReasoning,
}

const IN: u8 = 1;
const OUT: u8 = 2;
const READ: u8 = 4;
const WRITE: u8 = 8;
const M5: u8 = 16;
const H1: u8 = 32;
const AUDIO: u8 = 64;
const REASON: u8 = 128;

/// Number of units.
pub const UNITS: usize = 10;

impl Unit {
    /// Every unit, in index order.
    pub const ALL: [Unit; UNITS] = [
        Unit::Input,
        Unit::CacheRead,
        Unit::CacheWrite,
        Unit::CacheWrite5m,
        Unit::CacheWrite1h,
        Unit::InputAudio,
        Unit::CacheAudioRead,
        Unit::Output,
        Unit::OutputAudio,
        Unit::OutputReasoning,
    ];

    /// The genai-prices price key (`input_mtok`, …), also the override key
    /// without its `_mtok` suffix.
    pub fn key(self) -> &'static str {
        match self {
            Unit::Input => "input_mtok",
            Unit::CacheRead => "cache_read_mtok",
            Unit::CacheWrite => "cache_write_mtok",
            Unit::CacheWrite5m => "cache_write_5m_mtok",
            Unit::CacheWrite1h => "cache_write_1h_mtok",
            Unit::InputAudio => "input_audio_mtok",
            Unit::CacheAudioRead => "cache_audio_read_mtok",
            Unit::Output => "output_mtok",
            Unit::OutputAudio => "output_audio_mtok",
            Unit::OutputReasoning => "output_reasoning_mtok",
        }
    }

    /// The unit whose price key is `key`.
    pub fn from_key(key: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.key() == key)
    }

    const fn dims(self) -> u8 {
        match self {
            Unit::Input => IN,
            Unit::CacheRead => IN | READ,
            Unit::CacheWrite => IN | WRITE,
            Unit::CacheWrite5m => IN | WRITE | M5,
            Unit::CacheWrite1h => IN | WRITE | H1,
            Unit::InputAudio => IN | AUDIO,
            Unit::CacheAudioRead => IN | READ | AUDIO,
            Unit::Output => OUT,
            Unit::OutputAudio => OUT | AUDIO,
            Unit::OutputReasoning => OUT | REASON,
        }
    }
}

/// Units ordered most specific first, so that each unit's descendants are
/// settled before it (computed once).
const ORDER: [Unit; UNITS] = {
    let mut order = Unit::ALL;
    let mut i = 0;
    while i < UNITS {
        let mut j = i + 1;
        while j < UNITS {
            if order[j].dims().count_ones() > order[i].dims().count_ones() {
                let t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            j += 1;
        }
        i += 1;
    }
    order
};

/// One long-context tier: from more than `start` input tokens, every token
/// of the unit costs `price`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tier {
    /// Input tokens the request must exceed.
    pub start: u64,
    /// USD per million tokens above the threshold.
    pub price: f64,
}

/// The price of one unit, USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Rate {
    /// One price whatever the prompt's length.
    Flat(f64),
    /// A base price and long-context tiers (ascending); the tier is chosen by
    /// the request's total input tokens and applies to all its tokens.
    Tiered {
        /// Price up to the first tier.
        base: f64,
        /// Tiers, ascending by `start`.
        tiers: &'static [Tier],
    },
}

impl Rate {
    /// USD per million tokens for a request with `input` total input tokens.
    pub fn per_million(&self, input: u64) -> f64 {
        match *self {
            Rate::Flat(p) => p,
            Rate::Tiered { base, tiers } => tiers
                .iter()
                .rev()
                .find(|t| input > t.start)
                .map_or(base, |t| t.price),
        }
    }

    /// Multiply every price by `factor`. Tiers are static table data, so a
    /// scaled tiered rate keeps its thresholds and scales at use: see `Rates::scale`.
    fn scaled(self, factor: f64) -> Rate {
        match self {
            Rate::Flat(p) => Rate::Flat(p * factor),
            tiered => tiered,
        }
    }
}

/// A model's rates, one optional price per unit. Copy, so that resolving
/// date and variant layers allocates nothing.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Rates {
    /// Price per unit, indexed like `Unit::ALL`.
    pub per_unit: [Option<Rate>; UNITS],
    /// Factor applied to every price (an override's `scale`); 1 otherwise.
    pub factor: Option<f64>,
}

impl Rates {
    /// The rate of `unit`, if priced.
    pub fn get(&self, unit: Unit) -> Option<Rate> {
        self.per_unit[unit as usize]
    }

    /// Set the rate of `unit`.
    pub fn set(&mut self, unit: Unit, rate: Rate) {
        self.per_unit[unit as usize] = Some(rate);
    }

    /// Whether any unit is priced.
    pub fn is_empty(&self) -> bool {
        self.per_unit.iter().all(Option::is_none)
    }

    /// Every price times `factor` (negotiated discounts).
    pub fn scale(mut self, factor: f64) -> Rates {
        for r in self.per_unit.iter_mut().flatten() {
            *r = r.scaled(factor);
        }
        // Tiered rates cannot be rewritten in place (their tiers are
        // shared); the factor is kept for them and applied in `cost`.
        if self
            .per_unit
            .iter()
            .flatten()
            .any(|r| matches!(r, Rate::Tiered { .. }))
        {
            self.factor = Some(self.factor.unwrap_or(1.0) * factor);
        }
        self
    }

    /// Overlay: every unit `top` prices replaces this one's.
    pub fn overlay(mut self, top: &Rates) -> Rates {
        for (mine, theirs) in self.per_unit.iter_mut().zip(top.per_unit) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
        self
    }

    /// The cost of `counts` at these rates, per unit and in total (USD).
    pub fn cost(&self, counts: &Counts) -> Bill {
        // Cached audio belongs to both cache reads and audio input; with
        // both priced and it not, it would leave input twice. Bill it as a
        // cache read (genai-prices refuses such a price set outright).
        let mut this = *self;
        if let (None, Some(read), Some(_)) = (
            this.get(Unit::CacheAudioRead),
            this.get(Unit::CacheRead),
            this.get(Unit::InputAudio),
        ) {
            this.set(Unit::CacheAudioRead, read);
        }
        this.cost_as_is(counts)
    }

    fn cost_as_is(&self, counts: &Counts) -> Bill {
        let mut leaf = [0u64; UNITS];
        let mut bill = Bill::default();
        let input = counts.get(Unit::Input);
        for unit in ORDER {
            let Some(rate) = self.get(unit) else {
                continue;
            };
            let dims = unit.dims();
            let inner: u64 = ORDER
                .iter()
                .filter(|d| **d != unit && self.get(**d).is_some() && d.dims() & dims == dims)
                .map(|d| leaf[*d as usize])
                .sum();
            let n = counts.get(unit).saturating_sub(inner);
            leaf[unit as usize] = n;
            let factor = match rate {
                Rate::Tiered { .. } => self.factor.unwrap_or(1.0),
                Rate::Flat(_) => 1.0,
            };
            let usd = n as f64 * rate.per_million(input) * factor / 1_000_000.0;
            bill.per_unit[unit as usize] = usd;
            bill.tokens[unit as usize] = n;
            bill.total += usd;
        }
        bill
    }
}

/// Token totals per unit for one request (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts(pub [u64; UNITS]);

impl Counts {
    /// The total for `unit`.
    pub fn get(&self, unit: Unit) -> u64 {
        self.0[unit as usize]
    }

    /// Set the total for `unit`.
    pub fn set(&mut self, unit: Unit, n: u64) {
        self.0[unit as usize] = n;
    }
}

/// A request's cost, per unit and in total.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Bill {
    /// USD per unit (0 for units billed under a broader one).
    pub per_unit: [f64; UNITS],
    /// Tokens billed at each unit's own rate.
    pub tokens: [u64; UNITS],
    /// USD in all.
    pub total: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(list: &[(Unit, f64)]) -> Rates {
        let mut r = Rates::default();
        for (u, p) in list {
            r.set(*u, Rate::Flat(*p));
        }
        r
    }

    fn counts(list: &[(Unit, u64)]) -> Counts {
        let mut c = Counts::default();
        for (u, n) in list {
            c.set(*u, *n);
        }
        c
    }

    #[test]
    fn specific_units_come_before_the_units_they_belong_to() {
        for (i, u) in ORDER.iter().enumerate() {
            for broader in &ORDER[i + 1..] {
                assert!(
                    broader.dims() & u.dims() != u.dims() || broader.dims() == u.dims(),
                    "{u:?} must be settled after {broader:?}"
                );
            }
        }
    }

    #[test]
    fn cached_tokens_leave_the_input_rate_and_unpriced_units_stay_in_it() {
        let r = rates(&[
            (Unit::Input, 2.0),
            (Unit::CacheRead, 0.5),
            (Unit::Output, 8.0),
        ]);
        let c = counts(&[
            (Unit::Input, 1_000_000),
            (Unit::CacheRead, 400_000),
            (Unit::InputAudio, 100_000),
            (Unit::Output, 500_000),
            (Unit::OutputReasoning, 200_000),
        ]);
        let bill = r.cost(&c);
        // 600k uncached (audio among them) at 2, 400k cached at 0.5,
        // 500k output (reasoning among them) at 8.
        assert!((bill.total - (1.2 + 0.2 + 4.0)).abs() < 1e-9, "{bill:?}");
        assert_eq!(bill.tokens[Unit::Input as usize], 600_000);
    }

    #[test]
    fn cached_audio_leaves_input_once() {
        let r = rates(&[
            (Unit::Input, 1.0),
            (Unit::CacheRead, 0.5),
            (Unit::InputAudio, 10.0),
        ]);
        let c = counts(&[
            (Unit::Input, 1_000_000),
            (Unit::CacheRead, 300_000),
            (Unit::InputAudio, 400_000),
            (Unit::CacheAudioRead, 100_000),
        ]);
        // 300k cached (100k of them audio) at 0.5, 300k uncached audio at
        // 10, 400k uncached text at 1: every token once.
        let bill = r.cost(&c);
        assert!((bill.total - (0.15 + 3.0 + 0.4)).abs() < 1e-9, "{bill:?}");
    }

    #[test]
    fn one_hour_cache_writes_leave_the_five_minute_rate() {
        let r = rates(&[
            (Unit::Input, 3.0),
            (Unit::CacheWrite, 3.75),
            (Unit::CacheWrite1h, 6.0),
        ]);
        let c = counts(&[
            (Unit::Input, 3_000_000),
            (Unit::CacheWrite, 2_000_000),
            (Unit::CacheWrite1h, 500_000),
        ]);
        let bill = r.cost(&c);
        let want = 1.0 * 3.0 + 1.5 * 3.75 + 0.5 * 6.0;
        assert!((bill.total - want).abs() < 1e-9, "{bill:?}");
    }

    #[test]
    fn a_long_prompt_moves_every_token_to_the_tier_price() {
        static TIERS: [Tier; 1] = [Tier {
            start: 200_000,
            price: 2.5,
        }];
        let mut r = Rates::default();
        r.set(
            Unit::Input,
            Rate::Tiered {
                base: 1.25,
                tiers: &TIERS,
            },
        );
        let at = |n| r.cost(&counts(&[(Unit::Input, n)])).total;
        assert!((at(200_000) - 0.25).abs() < 1e-12);
        assert!((at(200_001) - 200_001.0 * 2.5 / 1e6).abs() < 1e-12);
        let half = r.scale(0.5);
        assert!((half.cost(&counts(&[(Unit::Input, 200_000)])).total - 0.125).abs() < 1e-12);
    }
}
