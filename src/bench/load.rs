//! Load generation: one level (target × prompt set × concurrency or rate)
//! in; its warm-up, then `--runs` measured runs out. Every request is
//! metered by the proxy's own `Meter` (same parser, same clock readings,
//! same `Measurement`), so TTFT and decode rate mean what they mean in
//! production.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::BodyExt as _;

use tokio::sync::oneshot;
use tokio::task::JoinSet;

use super::BenchArgs;
use super::prompts::{Prompt, PromptSet};
use super::report::{LevelReport, RunStats};
use super::sample::{Load, Sample};
use super::target::{Ask, Target};
use crate::config::UpstreamConfig;
use crate::meter::body::{Meter, MeteredBody};
use crate::meter::tokenize::Tokenizer;
use crate::meter::{Arrival, Measurement, Recorder, RequestBody, RequestFacts};
use crate::providers::Parser;
use crate::upstream::{Client, Egress};

/// One level to run.
#[derive(Debug, Clone, Copy)]
pub struct Level<'a> {
    /// What is measured.
    pub target: &'a Target,
    /// Its API key.
    pub key: Option<&'a str>,
    /// The prompts.
    pub set: &'a PromptSet,
    /// The load.
    pub load: Load,
}

/// Hands the finished measurement back to the request that started it.
struct Tap(Option<oneshot::Sender<Measurement>>);

impl Recorder for Tap {
    fn chunk_gap(&mut self, _gap: Duration) {}

    fn finish(mut self: Box<Self>, measurement: Measurement) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(measurement);
        }
    }
}

/// Largest response frame the parser takes (as the proxy's default).
const MAX_FRAME: usize = 1 << 20;

/// Runs levels: the HTTP client, the tokenizer and the run settings.
#[derive(Debug)]
pub struct Runner {
    client: Client,
    tokenizer: Arc<Tokenizer>,
    max_tokens: u32,
    ignore_eos: bool,
    runs: usize,
    requests: Option<usize>,
    warmup: Option<usize>,
    timeout: Duration,
}

/// What every request of a level shares.
struct Job {
    client: Client,
    tokenizer: Arc<Tokenizer>,
    target: Target,
    key: Option<String>,
    set: PromptSet,
    max_tokens: u32,
    ignore_eos: bool,
    timeout: Duration,
}

impl Runner {
    /// A runner whose connection pool holds the widest level.
    pub fn new(args: &BenchArgs, widest: Option<Load>) -> anyhow::Result<Runner> {
        let cfg = UpstreamConfig {
            pool_max_idle_per_host: widest.map_or(8, |l| l.width()).max(2),
            ..UpstreamConfig::default()
        };
        // Forward proxies as the proxy itself honours them (HTTPS_PROXY, NO_PROXY, …).
        let proxies = crate::config::proxy::ProxyEnv::from_process()
            .map_err(|(var, m)| anyhow::anyhow!("{var}: {m}"))?;
        Ok(Runner {
            client: Client::new(&cfg, Egress::from_env(&proxies))?,
            tokenizer: Tokenizer::start(true),
            max_tokens: args.max_tokens,
            ignore_eos: args.ignore_eos,
            runs: args.runs,
            requests: args.requests,
            warmup: args.warmup,
            timeout: Duration::from_secs(args.timeout),
        })
    }

    /// The HTTP client (info probes use it too).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Warm up, then run the level `--runs` times.
    pub async fn level(&self, level: &Level<'_>, progress: &Progress) -> LevelReport {
        let job = Arc::new(Job {
            client: self.client.clone(),
            tokenizer: self.tokenizer.clone(),
            target: level.target.clone(),
            key: level.key.map(str::to_owned),
            set: level.set.clone(),
            max_tokens: self.max_tokens,
            ignore_eos: self.ignore_eos && level.target.family.takes_ignore_eos(),
            timeout: self.timeout,
        });
        let what = format!(
            "{} {} {}",
            level.target.name(),
            level.set.name,
            level.load.label()
        );
        let mut numbers = 0u64..;
        progress.label(&format!("{what} warm-up"));
        let warmup = level.load.warmup(self.warmup);
        let _ = run_once(&job, level.load, warmup, &mut numbers, progress).await;
        let count = level.load.requests(self.requests);
        let mut runs = Vec::with_capacity(self.runs);
        let mut samples_all = Vec::new();
        for run in 1..=self.runs {
            progress.label(&format!("{what} run {run}/{}", self.runs));
            let (samples, elapsed) =
                run_once(&job, level.load, count, &mut numbers, progress).await;
            runs.push(RunStats::new(&samples, elapsed));
            samples_all.extend(samples);
        }
        LevelReport::new(level.set, level.load, runs, &samples_all)
    }
}

/// One run: `count` requests at `load`; the samples and the run's wall time.
async fn run_once(
    job: &Arc<Job>,
    load: Load,
    count: usize,
    numbers: &mut std::ops::RangeFrom<u64>,
    progress: &Progress,
) -> (Vec<Sample>, Duration) {
    // Prompts are built (tokenized) before the clock starts: client CPU
    // work inside the run would delay the reading of other answers.
    let prompts: Vec<Prompt> = numbers.take(count).map(|id| job.set.prompt(id)).collect();
    let start = Arrival::now().at;
    let mut tasks = JoinSet::new();
    match load {
        Load::Concurrency(n) => {
            let queue = Arc::new(Mutex::new(prompts.into_iter()));
            for _ in 0..n.min(count) {
                let (job, queue, progress) = (job.clone(), queue.clone(), progress.clone());
                tasks.spawn(async move {
                    let mut out = Vec::new();
                    loop {
                        let next = queue.lock().ok().and_then(|mut q| q.next());
                        let Some(prompt) = next else { break };
                        out.push(one(&job, &prompt).await);
                        progress.tick();
                    }
                    out
                });
            }
        }
        Load::Rate(r) => {
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / r));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for prompt in prompts {
                tick.tick().await;
                let (job, progress) = (job.clone(), progress.clone());
                tasks.spawn(async move {
                    let s = one(&job, &prompt).await;
                    progress.tick();
                    vec![s]
                });
            }
        }
    }
    let mut samples = Vec::with_capacity(count);
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(s) => samples.extend(s),
            Err(_) => samples.push(Sample::failed("bench_task_failed")),
        }
    }
    (samples, Arrival::now().at.saturating_duration_since(start))
}

/// Send `prompt` and meter its answer as the proxy would.
async fn one(job: &Job, prompt: &Prompt) -> Sample {
    let ask = Ask {
        max_tokens: job.max_tokens,
        ignore_eos: job.ignore_eos,
        key: job.key.as_deref(),
    };
    let Ok(req) = job.target.request(prompt, ask) else {
        return Sample::failed("invalid_request");
    };
    let family = job.target.family;
    let (host, port) = match (req.uri().host(), req.uri().port_u16()) {
        (Some(h), p) => (h.to_owned(), p.unwrap_or(80)),
        (None, _) => return Sample::failed("invalid_request"),
    };
    let (tx, rx) = oneshot::channel();
    let arrival = Arrival::now();
    let facts = RequestFacts {
        route: Arc::from("bench"),
        route_labels: Default::default(),
        provider: family.provider(),
        operation: Some(family.operation()),
        request_model: Some(job.target.model.clone()),
        stream: true,
        tenant: None,
        session: None,
        server_address: Arc::from(host.as_str()),
        server_port: port,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: arrival.wall,
        start: arrival.at,
    };
    let mut meter = Meter::new(facts, Box::new(Tap(Some(tx))));
    if let Some(plan) = job
        .tokenizer
        .plan(Some(&job.target.model), Some(req.body().clone()))
    {
        meter.count_tokens_with(plan);
    }
    let exchange = async move {
        meter.on_send();
        let res = match job.client.send_bytes(req).await {
            Ok(res) => res,
            Err(e) => {
                meter.fail_because(e.status().as_u16(), e.code(), Some(&e.to_string()));
                return None;
            }
        };
        let (head, body) = res.into_parts();
        let header = |name: http::HeaderName| {
            head.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let content_type = header(http::header::CONTENT_TYPE).unwrap_or_default();
        let parser = Parser::new(
            family.provider(),
            Some(family.operation()),
            &content_type,
            MAX_FRAME,
        )
        .ok_or_else(|| {
            crate::meter::Unmetered::UnknownFormat(format!("content-type {content_type:?}"))
        });
        let encoding = header(http::header::CONTENT_ENCODING);
        meter.on_head(head.status.as_u16(), true, parser, encoding.as_deref());
        let mut body = MeteredBody::new(body, meter, None, None);
        while let Some(frame) = body.frame().await {
            if frame.is_err() {
                break;
            }
        }
        header(http::header::SERVER)
    };
    let (server, timed_out) = match tokio::time::timeout(job.timeout, exchange).await {
        Ok(server) => (server, false),
        // Dropping the exchange cancels the request; the meter records it.
        Err(_) => (None, true),
    };
    match rx.await {
        Ok(m) if timed_out => Sample {
            error: Some("timeout".to_owned()),
            ..Sample::from_measurement(&m, server)
        },
        Ok(m) => Sample::from_measurement(&m, server),
        Err(_) => Sample::failed("not_metered"),
    }
}

/// Progress on stderr: requests done of the total, and the level running.
#[derive(Debug, Clone)]
pub struct Progress(Arc<ProgressState>);

#[derive(Debug)]
struct ProgressState {
    total: u64,
    done: AtomicU64,
    shown: bool,
    label: Mutex<String>,
}

/// Width of the bar in characters.
const BAR: u64 = 30;

impl Progress {
    /// A bar over `total` requests; drawn only when `shown`.
    pub fn new(total: u64, shown: bool) -> Progress {
        Progress(Arc::new(ProgressState {
            total: total.max(1),
            done: AtomicU64::new(0),
            shown,
            label: Mutex::new(String::new()),
        }))
    }

    /// Name what runs now.
    pub fn label(&self, label: &str) {
        if let Ok(mut l) = self.0.label.lock() {
            label.clone_into(&mut l);
        }
        self.draw();
    }

    /// One more request finished.
    pub fn tick(&self) {
        self.0.done.fetch_add(1, Ordering::Relaxed);
        self.draw();
    }

    fn draw(&self) {
        if !self.0.shown {
            return;
        }
        let done = self.0.done.load(Ordering::Relaxed).min(self.0.total);
        let filled = done * BAR / self.0.total;
        let label = self.0.label.lock().map(|l| l.clone()).unwrap_or_default();
        eprint!(
            "\r\x1b[2K[{}{}] {done}/{} {label}",
            "#".repeat(filled as usize),
            "-".repeat((BAR - filled) as usize),
            self.0.total
        );
    }

    /// Clear the bar.
    pub fn done(&self) {
        if self.0.shown {
            eprint!("\r\x1b[2K");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meter::Outcome;

    #[test]
    fn level_sizes_follow_the_load() {
        assert_eq!(Load::Concurrency(1).requests(None), 8);
        assert_eq!(Load::Concurrency(8).requests(None), 32);
        assert_eq!(Load::Concurrency(8).requests(Some(5)), 5);
        assert_eq!(Load::Concurrency(8).warmup(None), 8);
        assert_eq!(Load::Rate(2.0).requests(None), 20);
        assert_eq!(Load::Rate(2.0).warmup(Some(0)), 0);
        assert_eq!(Load::Concurrency(8).label(), "c=8");
        assert_eq!(Load::Rate(0.5).label(), "0.5 req/s");
    }

    #[test]
    fn a_failed_measurement_is_an_error_sample_with_its_type() {
        let facts = crate::meter::RequestFacts {
            route: Arc::from("bench"),
            route_labels: Default::default(),
            provider: crate::providers::ProviderKind::Openai,
            operation: None,
            request_model: None,
            stream: true,
            tenant: None,
            session: None,
            server_address: Arc::from("h"),
            server_port: 1,
            request_body: RequestBody::Sniffed,
            service_tier: None,
            start_wall: std::time::SystemTime::UNIX_EPOCH,
            start: Arrival::now().at,
        };
        let mut m = Measurement::empty(facts);
        assert_eq!(Sample::from_measurement(&m, None).error, None);
        m.outcome = Outcome::UpstreamError;
        m.status = 500;
        assert_eq!(
            Sample::from_measurement(&m, None).error.as_deref(),
            Some("upstream_error (HTTP 500)")
        );
        m.error_type = Some("server_error".into());
        assert_eq!(
            Sample::from_measurement(&m, None).error.as_deref(),
            Some("server_error")
        );
    }
}
