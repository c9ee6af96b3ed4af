//! The benchmark report: per-request samples in; per run the p50/p90/p99
//! of TTFT, prefill and decode rates and the level's throughput, per level
//! the median across runs with its spread, and the metadata a fair
//! comparison asks for. Serialised as the JSON report; printed as a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::BenchArgs;
use super::prompts::PromptSet;
use super::sample::{Load, Sample};
use super::target::{Family, Served, Target};

/// The report format's name and version (`schema` in the JSON).
pub const SCHEMA: &str = "tokentap.bench/1";

/// A whole benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: String,
    /// tokentap's version.
    pub tokentap_version: String,
    /// When the benchmark ran (RFC 3339, UTC).
    pub date: String,
    /// The machine that ran the client.
    pub client: Machine,
    /// What was asked for.
    pub settings: Settings,
    /// One entry per target.
    pub targets: Vec<TargetReport>,
}

/// The client machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub hostname: Option<String>,
    /// Operating system.
    pub os: String,
    /// CPU architecture.
    pub arch: String,
    /// CPUs available to the process.
    pub cpus: usize,
    /// CPU model, where the system says.
    pub cpu_model: Option<String>,
}

impl Machine {
    fn this() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        Machine {
            hostname: read("/proc/sys/kernel/hostname")
                .or_else(|| std::env::var("HOSTNAME").ok())
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty()),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model: read("/proc/cpuinfo").and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, m)| m.trim().to_owned())
            }),
        }
    }
}

/// The workload: what `bench compare` requires to match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Prompt sets, in the order they ran.
    pub prompt_sets: Vec<PromptSetInfo>,
    /// `max_tokens` asked for.
    pub max_tokens: u32,
    /// Whether `ignore_eos` was sent (to families that take it).
    pub ignore_eos: bool,
    /// Runs per level.
    pub runs: usize,
    /// Load levels.
    pub loads: Vec<Load>,
    /// Measured requests per run, when fixed by `--requests`.
    pub requests: Option<usize>,
    /// `--label`s.
    pub labels: BTreeMap<String, String>,
}

/// One prompt set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptSetInfo {
    /// `builtin-128` or `file:NAME`.
    pub name: String,
    /// Mean input tokens by the o200k tokenizer.
    pub mean_input_tokens: f64,
}

impl Settings {
    /// The settings of a run with `args`.
    pub fn new(args: &BenchArgs, sets: &[PromptSet], loads: &[Load]) -> Settings {
        Settings {
            prompt_sets: sets
                .iter()
                .map(|s| PromptSetInfo {
                    name: s.name.clone(),
                    mean_input_tokens: s.mean_tokens(),
                })
                .collect(),
            max_tokens: args.max_tokens,
            ignore_eos: args.ignore_eos,
            runs: args.runs,
            loads: loads.to_vec(),
            requests: args.requests,
            labels: super::labels(args),
        }
    }
}

/// One target's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    /// Display name.
    pub name: String,
    /// Base URL.
    pub base_url: String,
    /// API family.
    pub family: Family,
    /// Model as requested.
    pub model: String,
    /// What the server says it runs, and the models its answers named.
    pub served: Served,
    /// One entry per prompt set × load.
    pub levels: Vec<LevelReport>,
}

impl TargetReport {
    /// Fold the levels' observed models and `Server` header into `served`.
    pub fn new(target: &Target, mut served: Served, levels: Vec<LevelReport>) -> TargetReport {
        for level in &levels {
            for m in &level.models {
                served.saw_model(m);
            }
            if let Some(s) = &level.server {
                served.saw_server_header(s);
            }
        }
        TargetReport {
            name: target.name(),
            base_url: target.base.clone(),
            family: target.family,
            model: target.model.clone(),
            served,
            levels,
        }
    }
}

/// One level: its runs and their medians.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LevelReport {
    /// Prompt set name.
    pub prompt_set: String,
    /// The load.
    pub load: Load,
    /// Medians across runs, with min and max.
    pub summary: Summary,
    /// Each run.
    pub runs: Vec<RunStats>,
    /// Measured requests, all runs.
    pub requests: usize,
    /// Failed requests, all runs.
    pub errors: usize,
    /// Failed requests by error type.
    pub error_types: BTreeMap<String, usize>,
    /// Requests whose output tokens were estimated (no usage in the answer).
    pub estimated_tokens: usize,
    /// Models the answers named.
    pub models: Vec<String>,
    /// The first `Server` response header seen.
    pub server: Option<String>,
}

impl LevelReport {
    /// The level from its runs and all their samples.
    pub fn new(
        set: &PromptSet,
        load: Load,
        runs: Vec<RunStats>,
        samples: &[Sample],
    ) -> LevelReport {
        let mut error_types = BTreeMap::new();
        let mut models: Vec<String> = Vec::new();
        for s in samples {
            if let Some(e) = &s.error {
                *error_types.entry(e.clone()).or_insert(0) += 1;
            }
            if let Some(m) = &s.model {
                if !models.contains(m) {
                    models.push(m.clone());
                }
            }
        }
        LevelReport {
            prompt_set: set.name.clone(),
            load,
            summary: Summary::of(&runs),
            requests: samples.len(),
            errors: samples.iter().filter(|s| s.error.is_some()).count(),
            error_types,
            estimated_tokens: samples.iter().filter(|s| s.estimated).count(),
            models,
            server: samples.iter().find_map(|s| s.server.clone()),
            runs,
        }
    }
}

/// p50, p90 and p99 of one figure over a run's successful requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Median.
    pub p50: Option<f64>,
    /// 90th percentile.
    pub p90: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
}

impl Quantiles {
    fn of(values: impl Iterator<Item = f64>) -> Quantiles {
        let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Quantiles {
            p50: quantile(&v, 0.5),
            p90: quantile(&v, 0.9),
            p99: quantile(&v, 0.99),
        }
    }
}

/// The `q` quantile of sorted `v`, linearly interpolated; `None` when empty.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let last = v.len().checked_sub(1)?;
    let at = q.clamp(0.0, 1.0) * last as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    Some(v[lo] + (v[hi] - v[lo]) * (at - lo as f64))
}

/// One run of one level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStats {
    /// Requests sent.
    pub requests: usize,
    /// Requests that failed.
    pub errors: usize,
    /// Wall time of the run, seconds.
    pub elapsed_s: f64,
    /// Successful requests per second.
    pub requests_per_s: f64,
    /// Output tokens of successful requests per second.
    pub output_tokens_per_s: f64,
    /// Mean input tokens per successful request (the server's count).
    pub input_tokens_mean: Option<f64>,
    /// Mean output tokens per successful request.
    pub output_tokens_mean: Option<f64>,
    /// TTFT, seconds.
    pub ttft_s: Quantiles,
    /// Prefill tokens per second.
    pub prefill_tps: Quantiles,
    /// Decode tokens per second.
    pub decode_tps: Quantiles,
}

impl RunStats {
    /// The run's figures from its samples and wall time.
    pub fn new(samples: &[Sample], elapsed: Duration) -> RunStats {
        let ok: Vec<&Sample> = samples.iter().filter(|s| s.error.is_none()).collect();
        let secs = elapsed.as_secs_f64();
        let per_s = |n: f64| if secs > 0.0 { n / secs } else { 0.0 };
        let mean = |f: fn(&Sample) -> Option<u64>| {
            let v: Vec<f64> = ok.iter().filter_map(|s| f(s)).map(|n| n as f64).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let output: u64 = ok.iter().filter_map(|s| s.output_tokens).sum();
        RunStats {
            requests: samples.len(),
            errors: samples.len() - ok.len(),
            elapsed_s: secs,
            requests_per_s: per_s(ok.len() as f64),
            output_tokens_per_s: per_s(output as f64),
            input_tokens_mean: mean(|s| s.input_tokens),
            output_tokens_mean: mean(|s| s.output_tokens),
            ttft_s: Quantiles::of(ok.iter().filter_map(|s| s.ttft)),
            prefill_tps: Quantiles::of(ok.iter().filter_map(|s| s.prefill_tps)),
            decode_tps: Quantiles::of(ok.iter().filter_map(|s| s.decode_tps)),
        }
    }
}

/// A figure across runs: the median, and the lowest and highest run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median of the runs.
    pub median: Option<f64>,
    /// Lowest run.
    pub min: Option<f64>,
    /// Highest run.
    pub max: Option<f64>,
    /// Runs that had the figure.
    #[serde(default)]
    pub runs: usize,
}

impl Spread {
    fn of(values: impl Iterator<Item = Option<f64>>) -> Spread {
        let mut v: Vec<f64> = values.flatten().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        Spread {
            median: quantile(&v, 0.5),
            min: v.first().copied(),
            max: v.last().copied(),
            runs: v.len(),
        }
    }

    /// (max − min) / median, the spread as a share of the median; `None`
    /// with fewer than two runs (one run has no spread to show).
    pub fn relative(&self) -> Option<f64> {
        if self.runs < 2 {
            return None;
        }
        let m = self.median.filter(|m| *m != 0.0)?;
        Some((self.max? - self.min?) / m.abs())
    }
}

/// Quantiles across runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct QuantileSpread {
    /// p50 across runs.
    pub p50: Spread,
    /// p90 across runs.
    pub p90: Spread,
    /// p99 across runs.
    pub p99: Spread,
}

impl QuantileSpread {
    fn of(runs: &[RunStats], f: fn(&RunStats) -> Quantiles) -> QuantileSpread {
        QuantileSpread {
            p50: Spread::of(runs.iter().map(|r| f(r).p50)),
            p90: Spread::of(runs.iter().map(|r| f(r).p90)),
            p99: Spread::of(runs.iter().map(|r| f(r).p99)),
        }
    }
}

/// A level's figures: medians of its runs, with their spread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// TTFT, seconds.
    pub ttft_s: QuantileSpread,
    /// Prefill tokens per second.
    pub prefill_tps: QuantileSpread,
    /// Decode tokens per second.
    pub decode_tps: QuantileSpread,
    /// Successful requests per second.
    pub requests_per_s: Spread,
    /// Output tokens per second served.
    pub output_tokens_per_s: Spread,
    /// Output tokens per successful request.
    pub output_tokens_mean: Spread,
    /// Input tokens per successful request (the server's count).
    pub input_tokens_mean: Spread,
}

impl Summary {
    fn of(runs: &[RunStats]) -> Summary {
        Summary {
            ttft_s: QuantileSpread::of(runs, |r| r.ttft_s),
            prefill_tps: QuantileSpread::of(runs, |r| r.prefill_tps),
            decode_tps: QuantileSpread::of(runs, |r| r.decode_tps),
            requests_per_s: Spread::of(runs.iter().map(|r| Some(r.requests_per_s))),
            output_tokens_per_s: Spread::of(runs.iter().map(|r| Some(r.output_tokens_per_s))),
            output_tokens_mean: Spread::of(runs.iter().map(|r| r.output_tokens_mean)),
            input_tokens_mean: Spread::of(runs.iter().map(|r| r.input_tokens_mean)),
        }
    }
}

impl Report {
    /// A report of `targets` run with `settings`, stamped now.
    pub fn new(settings: Settings, targets: Vec<TargetReport>) -> Report {
        Report {
            schema: SCHEMA.to_owned(),
            tokentap_version: env!("CARGO_PKG_VERSION").to_owned(),
            date: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
            client: Machine::this(),
            settings,
            targets,
        }
    }
}

/// `12.3` or `-`.
pub fn num(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

/// Milliseconds from seconds, or `-`.
pub fn ms(v: Option<f64>) -> String {
    num(v.map(|s| s * 1000.0), 1)
}

/// `±4%`, the run-to-run spread, or empty.
pub fn spread(s: &Spread) -> String {
    s.relative()
        .map_or_else(String::new, |r| format!("±{:.0}%", r * 50.0))
}

/// The terminal table: per target, one row per level.
pub fn table(report: &Report) -> String {
    let mut out = String::new();
    let s = &report.settings;
    let _ = writeln!(
        out,
        "tokentap bench {} — {} run(s) per level, max_tokens {}{}, medians across runs (± half the run-to-run range)",
        report.tokentap_version,
        s.runs,
        s.max_tokens,
        if s.ignore_eos { ", ignore_eos" } else { "" }
    );
    if !s.labels.is_empty() {
        let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "labels: {}", labels.join(", "));
    }
    for t in &report.targets {
        let _ = writeln!(
            out,
            "\n{} [{}] {}",
            t.name,
            t.family.as_str(),
            served_line(&t.served)
        );
        let _ = writeln!(
            out,
            "{:<14} {:<8} {:>6} {:>16} {:>9} {:>9} {:>12} {:>16} {:>9} {:>9} {:>12} {:>7}",
            "prompts",
            "load",
            "reqs",
            "TTFT p50 ms",
            "p90",
            "p99",
            "prefill/s",
            "decode/s p50",
            "p90",
            "req/s",
            "out tok/s",
            "errors"
        );
        for l in &t.levels {
            let m = &l.summary;
            let _ = writeln!(
                out,
                "{:<14} {:<8} {:>6} {:>16} {:>9} {:>9} {:>12} {:>16} {:>9} {:>9} {:>12} {:>7}",
                l.prompt_set,
                l.load.label(),
                l.requests,
                format!("{} {}", ms(m.ttft_s.p50.median), spread(&m.ttft_s.p50)),
                ms(m.ttft_s.p90.median),
                ms(m.ttft_s.p99.median),
                num(m.prefill_tps.p50.median, 0),
                format!(
                    "{} {}",
                    num(m.decode_tps.p50.median, 1),
                    spread(&m.decode_tps.p50)
                ),
                num(m.decode_tps.p90.median, 1),
                num(m.requests_per_s.median, 2),
                num(m.output_tokens_per_s.median, 1),
                l.errors
            );
            for (kind, n) in &l.error_types {
                let _ = writeln!(out, "{:<24} error {kind}: {n}", "");
            }
        }
    }
    out
}

/// `served: model m (vllm 0.6.3, context 8192)`.
pub fn served_line(s: &Served) -> String {
    let mut parts = Vec::new();
    if !s.models.is_empty() {
        parts.push(format!("served model {}", s.models.join(", ")));
    }
    if let Some(sw) = &s.software {
        let v = s.software_version.as_deref().unwrap_or("");
        parts.push(format!("by {sw} {v}").trim_end().to_owned());
    }
    if let Some(c) = s.context_length {
        parts.push(format!("context {c}"));
    }
    if let Some(h) = &s.server_header {
        parts.push(format!("Server: {h}"));
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(ttft: f64, decode: f64, out: u64) -> Sample {
        Sample {
            ttft: Some(ttft),
            decode_tps: Some(decode),
            output_tokens: Some(out),
            ..Sample::default()
        }
    }

    #[test]
    fn quantiles_interpolate_and_empty_is_none() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[3.0], 0.99), Some(3.0));
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.5), Some(2.5));
        let v: Vec<f64> = (1..=101).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.9), Some(91.0));
        assert_eq!(quantile(&v, 0.99), Some(100.0));
    }

    #[test]
    fn runs_count_errors_and_throughput_from_successes_only() {
        let mut samples = vec![ok(0.1, 50.0, 10), ok(0.3, 30.0, 10), ok(0.2, 40.0, 10)];
        samples.push(Sample {
            error: Some("server_error".into()),
            ttft: Some(9.0),
            ..Sample::default()
        });
        let r = RunStats::new(&samples, Duration::from_secs(2));
        assert_eq!((r.requests, r.errors), (4, 1));
        assert_eq!(
            r.ttft_s.p50,
            Some(0.2),
            "the failed request's TTFT is not counted"
        );
        assert_eq!(r.decode_tps.p50, Some(40.0));
        assert_eq!(r.requests_per_s, 1.5);
        assert_eq!(r.output_tokens_per_s, 15.0);
        assert_eq!(r.output_tokens_mean, Some(10.0));
    }

    #[test]
    fn a_level_reports_the_median_run_with_its_spread_and_every_error() {
        let run = |ttft: f64| RunStats::new(&[ok(ttft, 10.0, 5)], Duration::from_secs(1));
        let runs = vec![run(0.3), run(0.1), run(0.2)];
        let set = PromptSet::builtin(16).expect("set");
        let samples = vec![
            ok(0.1, 10.0, 5),
            Sample::failed("timeout"),
            Sample::failed("timeout"),
        ];
        let l = LevelReport::new(&set, Load::Concurrency(2), runs, &samples);
        let ttft = l.summary.ttft_s.p50;
        assert_eq!(
            (ttft.median, ttft.min, ttft.max),
            (Some(0.2), Some(0.1), Some(0.3))
        );
        assert!((ttft.relative().expect("spread") - 1.0).abs() < 1e-9);
        let one = Spread::of([Some(0.2)].into_iter());
        assert_eq!((one.runs, one.relative()), (1, None), "one run, no spread");
        assert_eq!((l.requests, l.errors), (3, 2));
        assert_eq!(
            l.error_types.get("timeout"),
            Some(&2),
            "errors are counted by type"
        );
    }
}
