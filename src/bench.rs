//! `tokentap bench`: targets, prompts and load levels in; per-request
//! figures measured by tokentap's own meter (the proxy's `Meter`, parser
//! and recorder path, so a benchmark's TTFT is production's TTFT), folded
//! into medians of repeated runs, out as a terminal table, JSON and a
//! self-contained HTML report. `tokentap bench compare` puts two JSON
//! reports side by side and refuses ones that are not like with like.

pub mod compare;
pub mod html;
pub mod load;
pub mod prompts;
pub mod report;
pub mod sample;
pub mod target;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::simulate::{self, Simulator};
use load::{Level, Progress, Runner};
use prompts::PromptSet;
use report::{Report, Settings, TargetReport};
use sample::Load;
use target::Target;

/// `tokentap bench [FLAGS]` or `tokentap bench compare A.json B.json`.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchCli {
    /// The benchmark's flags when no subcommand is given.
    #[command(flatten)]
    pub args: BenchArgs,
    /// `compare`; `None` runs a benchmark.
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
}

/// What `tokentap bench` runs besides a benchmark.
#[derive(Debug, Clone, PartialEq, clap::Subcommand)]
pub enum BenchCommand {
    /// Put two JSON reports side by side; refuse when they are not like with like
    Compare(compare::CompareArgs),
}

/// Flags of a benchmark run.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct BenchArgs {
    /// A target as BASE_URL,FAMILY,MODEL[,KEY_ENV] (repeatable). FAMILY is
    /// openai (BASE_URL ends in /v1: vLLM, llama.cpp, TGI, Ollama's /v1),
    /// anthropic or ollama (native /api/chat). The key comes from the
    /// environment variable KEY_ENV, else OPENAI_API_KEY / ANTHROPIC_API_KEY
    /// when set
    #[arg(long = "target", value_name = "URL,FAMILY,MODEL[,KEY_ENV]", value_parser = Target::parse_arg)]
    pub targets: Vec<Target>,

    /// Run against the built-in simulated provider (no key, no network):
    /// its sim-gpt-fast and sim-gpt-large models, unless --target is given too
    #[arg(long)]
    pub simulate: bool,

    /// Concurrency levels: requests in flight at once (e.g. 1,8,32; default 1,8)
    #[arg(long, value_name = "N,N,…", value_delimiter = ',', value_parser = simulate::at_least_one_arg::<usize>)]
    pub concurrency: Vec<usize>,

    /// Request-rate levels instead of concurrency: requests started per
    /// second, open loop (e.g. 0.5,2)
    #[arg(long, value_name = "R,R,…", value_delimiter = ',', value_parser = positive_rate_arg, conflicts_with = "concurrency")]
    pub rate: Vec<f64>,

    /// Built-in prompt sets at these input lengths, counted with the
    /// o200k tokenizer (e.g. 128,1024,8192)
    #[arg(long, value_name = "TOKENS,…", value_delimiter = ',', default_value = "128", value_parser = simulate::at_least_one_arg::<usize>, conflicts_with = "prompts")]
    pub input_tokens: Vec<usize>,

    /// Your own prompts: a JSONL file, one {"prompt": "…"} or
    /// {"messages": […]} per line, used in turn
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,

    /// Output length asked for (max_tokens; num_predict for ollama)
    #[arg(long, default_value_t = 128, value_parser = simulate::at_least_one_arg::<u32>)]
    pub max_tokens: u32,

    /// Also send ignore_eos (vLLM, llama.cpp, TGI and SGLang honour it), so
    /// every answer runs to max_tokens; tokens actually received are reported
    #[arg(long)]
    pub ignore_eos: bool,

    /// Measured requests per run and level (default: 4 × concurrency, at least 8)
    #[arg(long, value_parser = simulate::at_least_one_arg::<usize>)]
    pub requests: Option<usize>,

    /// Repetitions of every level; figures are the median across runs, with their spread
    #[arg(long, default_value_t = 3, value_parser = simulate::at_least_one_arg::<usize>)]
    pub runs: usize,

    /// Uncounted warm-up requests before each level (default: its concurrency)
    #[arg(long)]
    pub warmup: Option<usize>,

    /// Give up on one request after this many seconds (counted as an error)
    #[arg(long, default_value_t = 300, value_parser = simulate::at_least_one_arg::<u64>)]
    pub timeout: u64,

    /// Facts the run cannot see, recorded in the report and checked by
    /// `bench compare` (repeatable): hardware=H100, quantization=fp8, …
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = label_arg)]
    pub labels: Vec<(String, String)>,

    /// Write the report as JSON to this file
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write a self-contained HTML report with charts to this file
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// No progress bar (it is off anyway when stderr is not a terminal)
    #[arg(long, short)]
    pub quiet: bool,
}

/// `--rate`: a finite number of requests per second > 0.
fn positive_rate_arg(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a request rate > 0 (requests per second)"
        )),
    }
}

/// `--label KEY=VALUE`.
fn label_arg(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!(
            "`{s}` is not KEY=VALUE (e.g. --label hardware=H100)"
        )),
    }
}

/// Models of the built-in simulator that `--simulate` measures.
pub const SIMULATED_MODELS: [&str; 2] = ["sim-gpt-fast", "sim-gpt-large"];

/// Run `tokentap bench` (or `bench compare`); errors are for `main` to print.
pub async fn run(cli: BenchCli) -> anyhow::Result<()> {
    match cli.command {
        Some(BenchCommand::Compare(args)) => compare::run(&args),
        None => bench(cli.args).await,
    }
}

async fn bench(args: BenchArgs) -> anyhow::Result<()> {
    let mut targets = args.targets.clone();
    // The simulator lives as long as the benchmark.
    let _sim = if args.simulate {
        let (addr, task) = start_simulator().await?;
        if targets.is_empty() {
            targets = SIMULATED_MODELS
                .iter()
                .map(|m| Target::simulated(addr, m))
                .collect();
        }
        Some(task)
    } else {
        None
    };
    anyhow::ensure!(
        !targets.is_empty(),
        "nothing to measure: give --target URL,FAMILY,MODEL (repeatable) or --simulate"
    );
    let loads = loads(&args);
    let sets = prompt_sets(&args)?;
    let settings = Settings::new(&args, &sets, &loads);
    let runner = Runner::new(&args, loads.iter().copied().max_by_key(Load::width))?;
    let total = plan_total(&args, &loads, &sets, targets.len());
    let progress = Progress::new(total, !args.quiet && std::io::stderr().is_terminal());

    let mut reports = Vec::with_capacity(targets.len());
    for target in &targets {
        let key = target
            .key()
            .with_context(|| format!("target {}", target.name()))?;
        let served = target.probe(runner.client(), key.as_deref()).await;
        let mut levels = Vec::new();
        for set in &sets {
            for load in &loads {
                let level = Level {
                    target,
                    key: key.as_deref(),
                    set,
                    load: *load,
                };
                levels.push(runner.level(&level, &progress).await);
            }
        }
        reports.push(TargetReport::new(target, served, levels));
    }
    progress.done();

    let report = Report::new(settings, reports);
    print!("{}", report::table(&report));
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("--json {}: cannot write", path.display()))?;
        eprintln!("tokentap bench: JSON report written to {}", path.display());
    }
    if let Some(path) = &args.html {
        std::fs::write(path, html::render(&report))
            .with_context(|| format!("--html {}: cannot write", path.display()))?;
        eprintln!("tokentap bench: HTML report written to {}", path.display());
    }
    let levels = report.targets.iter().flat_map(|t| &t.levels);
    anyhow::ensure!(
        levels.clone().any(|l| l.errors < l.requests),
        "every measured request failed ({} errors; by type in the table above)",
        levels.map(|l| l.errors).sum::<usize>()
    );
    Ok(())
}

/// The load levels: the rates when given, else the concurrency levels (1 and 8 by default).
fn loads(args: &BenchArgs) -> Vec<Load> {
    if !args.rate.is_empty() {
        return args.rate.iter().map(|r| Load::Rate(*r)).collect();
    }
    let levels = if args.concurrency.is_empty() {
        vec![1, 8]
    } else {
        args.concurrency.clone()
    };
    levels.into_iter().map(Load::Concurrency).collect()
}

fn prompt_sets(args: &BenchArgs) -> anyhow::Result<Vec<PromptSet>> {
    match &args.prompts {
        Some(path) => Ok(vec![PromptSet::from_jsonl(path)?]),
        None => args
            .input_tokens
            .iter()
            .map(|n| PromptSet::builtin(*n))
            .collect(),
    }
}

/// Requests the whole benchmark sends (warm-ups included), for the progress bar.
fn plan_total(args: &BenchArgs, loads: &[Load], sets: &[PromptSet], targets: usize) -> u64 {
    let per_target: usize = loads
        .iter()
        .map(|l| l.warmup(args.warmup) + args.runs * l.requests(args.requests))
        .sum();
    (per_target * sets.len() * targets) as u64
}

/// The simulated provider on a free loopback port, with the demo's models.
async fn start_simulator() -> anyhow::Result<(std::net::SocketAddr, AbortOnDrop)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("--simulate: cannot bind a loopback port for the simulator")?;
    let addr = listener.local_addr()?;
    let models = simulate::demo_models()
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p))
        .collect();
    let sim: Arc<Simulator> = Simulator::new(simulate::Profile::default(), models);
    let task = tokio::spawn(simulate::serve(listener, sim));
    Ok((addr, AbortOnDrop(task)))
}

/// Stops a background task when dropped.
#[derive(Debug)]
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `--label`s as a sorted map (a repeated key keeps its last value).
pub(crate) fn labels(args: &BenchArgs) -> BTreeMap<String, String> {
    args.labels.iter().cloned().collect()
}
