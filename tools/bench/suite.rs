//! The end-to-end suite: options in; simulators, proxies and interleaved
//! load runs in between; a JSON line per run and a Markdown report (medians,
//! spread, ratios to direct) out. Talks only to 127.0.0.1 and stops only
//! the processes it started.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use serde::Serialize;
use tokentap::simulate::{at_least_one_arg, non_negative_arg};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::cores::{self, Cores, Pinning};
use crate::h2;
use crate::load::{self, Api, Report, Spec};
use crate::procs;
use crate::targets::{self, Binaries, Class, Kind, Placement, Target, Upstreams};
use crate::ws::{self, WS_WORKLOADS, WsReport, WsWorkload};

/// `tokentap-bench suite` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SuiteArgs {
    /// CI smoke: 1 round of 1 s runs, fewer workloads, 200 held streams
    #[arg(long)]
    pub quick: bool,
    /// Interleaved rounds (≥ 1; default 3, quick 1)
    #[arg(long, value_parser = at_least_one_arg::<usize>)]
    pub rounds: Option<usize>,
    /// Seconds measured per run (≥ 0; default 10, quick 1)
    #[arg(long, value_parser = non_negative_arg)]
    pub duration: Option<f64>,
    /// Seconds of warm-up before each run's window (≥ 0; default 1, quick 0.3)
    #[arg(long, value_parser = non_negative_arg)]
    pub warmup: Option<f64>,
    /// Targets, comma-separated (default: direct and every installed proxy):
    /// direct,nginx,envoy,floor,tokentap,tokentap-noexport,tokentap-sampled
    /// (export at sampling ratio 0.01)
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Workloads, comma-separated (default: all; see docs/BENCHMARKS.md)
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Concurrent slow streams in the memory scenario (default 9900, quick 200; 0 = skip)
    #[arg(long)]
    pub memory_streams: Option<usize>,
    /// Concurrent streams in the HTTP/2 upstream scenario (default 500,
    /// quick 0 = skip); the upstream allows 100 per connection
    #[arg(long)]
    pub h2_streams: Option<usize>,
    /// Directory for results (a timestamped folder is made inside)
    #[arg(long, default_value = "target/bench-results")]
    pub out: PathBuf,
    /// Directory holding the `tokentap` binary (default: next to this binary)
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Pin each proxy (nginx, Envoy, the floor, tokentap) to these cores
    /// (`0`, `0,2`, `0-3`) with `taskset -c`; the proxies then run as many
    /// workers as cores unless --workers says otherwise
    #[arg(long)]
    pub proxy_cores: Option<String>,
    /// With --proxy-cores: the cores of the load generator, the simulators
    /// and the OTLP sink (this process and its other children); default:
    /// every other core this process may use
    #[arg(long, requires = "proxy_cores")]
    pub load_cores: Option<String>,
    /// Workers per proxy: nginx `worker_processes`, Envoy `--concurrency`,
    /// the floor's `--threads`, tokentap's `server.threads` (default: the
    /// number of proxy cores when pinned, else each proxy's usual)
    #[arg(long)]
    pub workers: Option<usize>,
    /// With --proxy-cores: run the whole suite once per count in this list
    /// (e.g. `1,2,4`), each on the first N proxy cores with N workers, and
    /// end with throughput by core count
    #[arg(long, value_delimiter = ',', requires = "proxy_cores")]
    pub scale: Vec<usize>,
}

/// One load pattern.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Workload {
    pub name: &'static str,
    pub class: Class,
    pub api: Api,
    pub stream: bool,
    pub concurrency: usize,
    pub max_tokens: Option<u32>,
    /// Every request carries an agent session header.
    pub session: bool,
}

const fn w(
    name: &'static str,
    class: Class,
    stream: bool,
    concurrency: usize,
    max_tokens: Option<u32>,
) -> Workload {
    Workload {
        name,
        class,
        api: Api::Chat,
        stream,
        concurrency,
        max_tokens,
        session: false,
    }
}

/// Every workload, in run order.
pub(crate) const WORKLOADS: [Workload; 8] = [
    w("nonstream_c16", Class::Fast, false, 16, None),
    w("nonstream_c64", Class::Fast, false, 64, None),
    w("stream_c64", Class::Fast, true, 64, None),
    w("stream_c1", Class::Fast, true, 1, None),
    w("paced_c64", Class::Paced, true, 64, Some(50)),
    w("stream_c1000", Class::Fast, true, 1000, None),
    Workload {
        name: "anthropic_stream_c64",
        api: Api::Messages,
        ..w("", Class::Fast, true, 64, None)
    },
    // stream_c64 where every request belongs to an agent session (one per
    // connection): the rollups, and with a state store its round trips.
    Workload {
        name: "session_c64",
        session: true,
        ..w("", Class::Fast, true, 64, None)
    },
];

const QUICK_WORKLOADS: [&str; 4] = ["nonstream_c16", "stream_c64", "stream_c1", "paced_c64"];

/// One run's record (a line of runs.jsonl).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Run {
    pub round: usize,
    pub workload: &'static str,
    pub target: &'static str,
    #[serde(flatten)]
    pub load: Report,
    /// Proxy CPU (user + system) inside the measurement window.
    pub cpu_ms: Option<f64>,
    pub cpu_per_req_ms: Option<f64>,
    /// The user-space and kernel shares of `cpu_per_req_ms`.
    pub user_per_req_ms: Option<f64>,
    pub system_per_req_ms: Option<f64>,
    /// Proxy peak RSS during the run (VmHWM, reset before it).
    pub peak_rss_mib: Option<f64>,
}

/// One WebSocket relay run's record (a line of runs.jsonl).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WsRun {
    pub round: usize,
    pub workload: &'static str,
    pub target: &'static str,
    #[serde(flatten)]
    pub load: WsReport,
    /// Proxy CPU (user + system) inside the measurement window.
    pub cpu_ms: Option<f64>,
    /// Proxy CPU per relayed message (either direction), in microseconds.
    pub cpu_per_msg_us: Option<f64>,
}

/// The memory scenario's record.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Memory {
    pub target: &'static str,
    pub streams: usize,
    pub established: usize,
    pub failed: usize,
    pub rss_idle_mib: f64,
    pub rss_loaded_mib: f64,
    pub peak_rss_mib: f64,
    pub kib_per_stream: f64,
    pub first_error: Option<String>,
}

/// Byte-identity verdicts: target → (case → identical).
type Identity = BTreeMap<&'static str, Vec<(&'static str, bool)>>;

struct Plan {
    rounds: usize,
    duration: Duration,
    warmup: Duration,
    kinds: Vec<Kind>,
    workloads: Vec<Workload>,
    ws_workloads: Vec<WsWorkload>,
    h2_streams: usize,
    memory_streams: usize,
    dir: PathBuf,
    place: Placement,
    /// The proxies are debug builds (`target/debug`): their figures check
    /// that the suite runs and say nothing of performance, so the report
    /// prints no ratio.
    debug: bool,
}

/// What one pass of the suite measured, for the scaling summary.
struct Outcome {
    runs: Vec<Run>,
    workers: usize,
    dir: PathBuf,
}

/// Resolve --proxy-cores and --load-cores against the cores this process
/// may use; none without --proxy-cores.
fn pinning(args: &SuiteArgs) -> Result<Option<Pinning>, String> {
    let Some(proxy) = args.proxy_cores.as_deref() else {
        return Ok(None);
    };
    let proxy = Cores::parse(proxy)?;
    let load = args.load_cores.as_deref().map(Cores::parse).transpose()?;
    Pinning::split(&cores::allowed()?, &proxy, load.as_ref()).map(Some)
}

/// The passes a run makes: one placement each (several with --scale).
fn placements(args: &SuiteArgs, pin: Option<&Pinning>) -> Result<Vec<Placement>, String> {
    let Some(pin) = pin else {
        return Ok(vec![Placement {
            cores: None,
            workers: args.workers,
        }]);
    };
    if args.scale.is_empty() {
        return Ok(vec![Placement {
            cores: Some(pin.proxy.clone()),
            workers: Some(args.workers.unwrap_or(pin.proxy.len())),
        }]);
    }
    args.scale
        .iter()
        .map(|&n| {
            if n == 0 || n > pin.proxy.len() {
                return Err(format!(
                    "--scale {n}: needs 1 to {} (the proxy cores given)",
                    pin.proxy.len()
                ));
            }
            Ok(Placement {
                cores: Some(pin.proxy.first(n)),
                workers: Some(n),
            })
        })
        .collect()
}

pub(crate) async fn run(args: SuiteArgs) -> Result<(), String> {
    let pin = pinning(&args)?;
    let passes = placements(&args, pin.as_ref())?;
    if let Some(p) = &pin {
        // Before the sink and the simulators start: they inherit it.
        cores::pin_self(&p.load)?;
        eprintln!(
            "pinned: proxies on cores {}, load generator, simulators and OTLP sink on {}",
            p.proxy.list(),
            p.load.list()
        );
    }
    if passes.len() == 1 {
        return run_once(&args, &passes[0]).await.map(|_| ());
    }
    let mut outcomes = Vec::new();
    let mut failed = None;
    for place in &passes {
        match run_once(&args, place).await {
            Ok(o) => outcomes.push(o),
            Err(e) => {
                eprintln!("pass with {:?} workers: {e}", place.workers);
                failed = Some(e);
            }
        }
    }
    let table = scaling_report(&outcomes);
    println!("{table}");
    if let Some(first) = outcomes.first() {
        let path = first.dir.join("scaling.md");
        write(&path, &table)?;
        eprintln!("scaling summary in {}", path.display());
    }
    failed.map_or(Ok(()), Err)
}

/// Throughput by worker count (medians over rounds), and the factor over
/// the smallest count, per workload and proxy.
fn scaling_report(outcomes: &[Outcome]) -> String {
    let mut s = String::new();
    let Some(base) = outcomes.iter().min_by_key(|o| o.workers) else {
        return s;
    };
    let _ = writeln!(
        s,
        "### Throughput by proxy cores (N pinned cores, N workers; medians of the rounds; × = vs {} core(s))\n",
        base.workers
    );
    let counts: Vec<String> = outcomes
        .iter()
        .map(|o| format!("{} core(s)", o.workers))
        .collect();
    let _ = writeln!(s, "| workload | target | {} |", counts.join(" | "));
    let _ = writeln!(s, "|---|---|{}", "---|".repeat(outcomes.len()));
    let rps = |o: &Outcome, wl: &str, t: &str| {
        stat(
            o.runs
                .iter()
                .filter(|r| r.workload == wl && r.target == t)
                .map(|r| r.load.rps)
                .collect(),
        )
        .map(|(m, _)| m)
    };
    let mut seen: Vec<(&'static str, &'static str)> = Vec::new();
    for r in &base.runs {
        if r.target != "direct" && !seen.contains(&(r.workload, r.target)) {
            seen.push((r.workload, r.target));
        }
    }
    for (wl, t) in seen {
        let first = rps(base, wl, t);
        let cells: Vec<String> = outcomes
            .iter()
            .map(|o| match (rps(o, wl, t), first) {
                (Some(v), Some(b)) if b > 0.0 => format!("{v:.0} ({:.2}×)", v / b),
                (Some(v), _) => format!("{v:.0}"),
                _ => "–".into(),
            })
            .collect();
        let _ = writeln!(s, "| {wl} | {t} | {} |", cells.join(" | "));
    }
    s
}

/// One pass of the suite with the proxies placed as `place` says.
async fn run_once(args: &SuiteArgs, place: &Placement) -> Result<Outcome, String> {
    let bins = Binaries::find(targets::tokentap_bin(args.bin_dir.as_deref())?);
    let mut plan = plan(args, &bins, place)?;
    std::fs::create_dir_all(&plan.dir).map_err(|e| format!("{}: {e}", plan.dir.display()))?;
    // nginx resolves relative paths against its prefix: hand out absolute ones.
    plan.dir =
        std::fs::canonicalize(&plan.dir).map_err(|e| format!("{}: {e}", plan.dir.display()))?;
    eprintln!("results in {}", plan.dir.display());
    warn_open_files(plan.memory_streams);
    let (sink_addr, sink) = crate::sink::start(targets::addr(0))
        .await
        .map_err(|e| format!("OTLP sink: {e}"))?;

    let ups = Upstreams::start(&bins.tokentap, &plan.dir)?;
    let mut running = Vec::new();
    for kind in &plan.kinds {
        match targets::start(*kind, &bins, &ups, &plan.dir, sink_addr, &plan.place) {
            Ok(t) => running.push(t),
            Err(e) => eprintln!("skipping {}: {e}", kind.name()),
        }
    }
    let identity = check_identity(&running).await;
    let tck = procs::clk_tck();

    let mut runs = Vec::new();
    let mut ws_runs = Vec::new();
    let mut jsonl = String::new();
    for round in 1..=plan.rounds {
        for wl in &plan.workloads {
            for target in &mut running {
                if let Some(p) = target.proc.as_mut() {
                    if !p.alive() {
                        return Err(format!("{} died; see {}", p.name, plan.dir.display()));
                    }
                }
                let r = one_run(round, wl, target, &plan, tck).await;
                eprintln!(
                    "round {round} {:<22} {:<18} {:>9.1} req/s  ttft p50 {:>7.3} ms  p99 {:>8.3} ms  cpu/req {:>7} ms  errors {}",
                    wl.name,
                    target.kind.name(),
                    r.load.rps,
                    r.load.ttft_p50_ms.unwrap_or(f64::NAN),
                    r.load.ttft_p99_ms.unwrap_or(f64::NAN),
                    r.cpu_per_req_ms.map_or("-".into(), |c| format!("{c:.4}")),
                    r.load.errors,
                );
                let _ = writeln!(jsonl, "{}", serde_json::to_string(&r).unwrap_or_default());
                runs.push(r);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        for wl in &plan.ws_workloads {
            // Envoy's generated config routes no WebSocket upgrades, and
            // the floor relays none.
            for target in running
                .iter()
                .filter(|t| !matches!(t.kind, Kind::Envoy | Kind::Floor))
            {
                let r = ws_run(round, wl, target, &plan, tck).await;
                eprintln!(
                    "round {round} {:<22} {:<18} {:>9.0} msg/s {:>7.1} MB/s  latency p50 {:>7.3} ms  p99 {:>8.3} ms  cpu/msg {:>6} us  errors {}",
                    wl.name,
                    target.kind.name(),
                    r.load.msgs_per_s,
                    r.load.mb_per_s,
                    r.load.latency_p50_ms.unwrap_or(f64::NAN),
                    r.load.latency_p99_ms.unwrap_or(f64::NAN),
                    r.cpu_per_msg_us.map_or("-".into(), |c| format!("{c:.2}")),
                    r.load.errors,
                );
                let _ = writeln!(jsonl, "{}", serde_json::to_string(&r).unwrap_or_default());
                ws_runs.push(r);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    // Fresh processes for the memory scenario, so earlier runs' allocator
    // state does not count as per-stream memory.
    drop(running);
    let mut h2_runs = Vec::new();
    if plan.h2_streams > 0 && plan.kinds.contains(&Kind::Tokentap) {
        match h2_scenario(&plan, &bins).await {
            Ok(r) => {
                for run in &r {
                    let _ = writeln!(jsonl, "{}", serde_json::to_string(run).unwrap_or_default());
                }
                h2_runs = r;
            }
            Err(e) => eprintln!("HTTP/2 upstream scenario: {e}"),
        }
    }
    let mut memory = Vec::new();
    if plan.memory_streams > 0 {
        for kind in &plan.kinds {
            if *kind == Kind::Direct {
                continue;
            }
            match memory_run(*kind, &bins, &ups, &plan, sink_addr).await {
                Ok(m) => {
                    eprintln!(
                        "memory {:<18} {} streams ({} failed): {:.1} MiB idle, {:.1} MiB loaded, {:.1} KiB/stream",
                        m.target,
                        m.established,
                        m.failed,
                        m.rss_idle_mib,
                        m.rss_loaded_mib,
                        m.kib_per_stream
                    );
                    let _ = writeln!(jsonl, "{}", serde_json::to_string(&m).unwrap_or_default());
                    memory.push(m);
                }
                Err(e) => eprintln!("memory scenario via {}: {e}", kind.name()),
            }
        }
    }
    drop(ups);
    let sink_note = format!(
        "OTLP sink received {} export requests, {:.1} MiB",
        sink.requests.load(Ordering::Relaxed),
        sink.bytes.load(Ordering::Relaxed) as f64 / 1048576.0
    );
    let mut report = report(&plan, &runs, &memory, &identity, &sink_note);
    report.push_str(&ws_report(&plan, &ws_runs));
    report.push_str(&h2_report(&plan, &h2_runs));
    write(&plan.dir.join("runs.jsonl"), &jsonl)?;
    write(&plan.dir.join("report.md"), &report)?;
    println!("{report}");
    let errors: u64 = runs.iter().map(|r| r.load.errors).sum();
    let empty =
        runs.iter().any(|r| r.load.requests == 0) || ws_runs.iter().any(|r| r.load.messages == 0);
    let not_identical = identity.values().flatten().any(|(_, same)| !same);
    if empty || not_identical {
        return Err(format!(
            "suite failed: {}{}",
            if empty {
                "a run completed no request; "
            } else {
                ""
            },
            if not_identical {
                "a proxy changed response bytes"
            } else {
                ""
            }
        ));
    }
    if errors > 0 {
        eprintln!("note: {errors} request errors in total (see runs.jsonl)");
    }
    Ok(Outcome {
        runs,
        workers: plan.place.workers.unwrap_or(0),
        dir: plan.dir,
    })
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Descriptors a proxy needs besides its held streams (listeners, logs,
/// pooled upstream connections, the OTLP exporter).
const FD_SLACK: u64 = 128;

/// Say up front when the memory scenario cannot hold `streams`: each costs a
/// proxy two descriptors (client and upstream side), and the proxies inherit
/// this process's soft limit, which only the shell raises (`ulimit -n`, as
/// `scripts/bench.sh` does).
fn warn_open_files(streams: usize) {
    let Some((soft, hard)) = procs::open_files_limit() else {
        return;
    };
    let need = 2 * streams as u64 + FD_SLACK;
    if streams == 0 || soft >= need {
        return;
    }
    let fix = if hard >= need {
        format!("run `ulimit -n {hard}` first")
    } else {
        let most = hard.saturating_sub(FD_SLACK) / 2;
        format!("the hard limit allows at most --memory-streams {most}")
    };
    eprintln!(
        "warning: holding {streams} streams needs about {need} open files per proxy, \
         but the soft limit is {soft} (hard {hard}): {fix}"
    );
}

fn plan(args: &SuiteArgs, bins: &Binaries, place: &Placement) -> Result<Plan, String> {
    let q = args.quick;
    let kinds = if args.targets.is_empty() {
        let mut k = vec![Kind::Direct];
        if bins.nginx.is_some() {
            k.push(Kind::Nginx);
        }
        if bins.envoy.is_some() && !q {
            k.push(Kind::Envoy);
        }
        if !q {
            k.push(Kind::Floor);
        }
        k.push(Kind::Tokentap);
        if !q {
            k.push(Kind::TokentapNoExport);
        }
        k
    } else {
        args.targets
            .iter()
            .map(|t| Kind::parse(t).ok_or(format!("unknown target `{t}`")))
            .collect::<Result<_, _>>()?
    };
    let ws_workloads: Vec<WsWorkload> = if args.workloads.is_empty() {
        WS_WORKLOADS.to_vec()
    } else {
        WS_WORKLOADS
            .iter()
            .filter(|w| args.workloads.iter().any(|n| n == w.name))
            .copied()
            .collect()
    };
    let workloads = if args.workloads.is_empty() {
        WORKLOADS
            .iter()
            .filter(|w| !q || QUICK_WORKLOADS.contains(&w.name))
            .copied()
            .collect()
    } else {
        args.workloads
            .iter()
            .filter(|n| !ws_workloads.iter().any(|w| w.name == n.as_str()))
            .map(|n| {
                WORKLOADS
                    .iter()
                    .find(|w| w.name == n)
                    .copied()
                    .ok_or(format!("unknown workload `{n}`"))
            })
            .collect::<Result<_, _>>()?
    };
    let secs = |v: Option<f64>, full: f64, quick: f64| {
        Duration::from_secs_f64(v.unwrap_or(if q { quick } else { full }))
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Ok(Plan {
        rounds: args.rounds.unwrap_or(if q { 1 } else { 3 }),
        duration: secs(args.duration, 10.0, 1.0),
        warmup: secs(args.warmup, 1.0, 0.3),
        kinds,
        workloads,
        ws_workloads,
        h2_streams: args.h2_streams.unwrap_or(if q { 0 } else { 500 }),
        memory_streams: args.memory_streams.unwrap_or(if q { 200 } else { 9900 }),
        dir: args.out.join(format!(
            "{}{stamp}{}",
            if q { "quick-" } else { "" },
            place.workers.map_or(String::new(), |n| format!("-w{n}"))
        )),
        place: place.clone(),
        debug: bins
            .tokentap
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "debug"),
    })
}

/// A ratio cell: `–` for a debug build, whose ratios are no performance
/// figures (a debug tokentap is several times slower than its release build).
fn ratio(plan: &Plan, v: Option<(f64, f64)>) -> String {
    if plan.debug {
        "– (debug build)".into()
    } else {
        fmt(v, 2, "×")
    }
}

/// The report's first lines for a debug build: what its figures are for.
const DEBUG_BANNER: &str = "**Debug build: a smoke run that checks the suite works. \
    These figures are not performance figures (debug code is several times slower), \
    so no ratio is printed; run `scripts/bench.sh` (release) to measure.**\n\n";

async fn one_run(round: usize, wl: &Workload, target: &Target, plan: &Plan, tck: f64) -> Run {
    let pids = target.pids();
    procs::reset_peak(&pids);
    let spec = Spec {
        addr: target.addr(wl.class),
        path: format!("{}{}", wl.class.prefix(), wl.api.path()),
        body: wl.api.body(wl.stream, wl.max_tokens),
        stream: wl.stream,
        concurrency: wl.concurrency,
        warmup: plan.warmup,
        duration: plan.duration,
        ramp: 256,
        session: wl.session,
    };
    // Read the proxy's CPU time at the window's edges, beside the load.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cpu_pids = pids.clone();
    let cpu = tokio::spawn(async move {
        let (start, end): (Instant, Instant) = rx.await.ok()?;
        tokio::time::sleep_until(start).await;
        let a = procs::cpu_ticks_split(&cpu_pids);
        tokio::time::sleep_until(end).await;
        let b = procs::cpu_ticks_split(&cpu_pids);
        Some((b.0.saturating_sub(a.0), b.1.saturating_sub(a.1)))
    });
    let report = load::run(spec, |s, e| {
        let _ = tx.send((s, e));
    })
    .await;
    let ticks = cpu.await.ok().flatten();
    let has_proc = !pids.is_empty();
    let ms = |t: u64| t as f64 * 1000.0 / tck;
    let split = ticks.filter(|_| has_proc);
    let cpu_ms = split.map(|(u, s)| ms(u + s));
    let per_req = |v: Option<f64>| {
        v.filter(|_| report.requests > 0)
            .map(|c| c / report.requests as f64)
    };
    let peak = has_proc.then(|| procs::status_kib(&pids, "VmHWM") as f64 / 1024.0);
    Run {
        round,
        workload: wl.name,
        target: target.kind.name(),
        cpu_per_req_ms: per_req(cpu_ms),
        user_per_req_ms: per_req(split.map(|(u, _)| ms(u))),
        system_per_req_ms: per_req(split.map(|(_, s)| ms(s))),
        cpu_ms,
        peak_rss_mib: peak,
        load: report,
    }
}

/// One WebSocket workload through `target`, with the proxy's CPU time
/// read at the window's edges.
async fn ws_run(round: usize, wl: &WsWorkload, target: &Target, plan: &Plan, tck: f64) -> WsRun {
    let pids = target.pids();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let cpu_pids = pids.clone();
    let cpu = tokio::spawn(async move {
        let (start, end): (Instant, Instant) = rx.await.ok()?;
        tokio::time::sleep_until(start).await;
        let a = procs::cpu_ticks(&cpu_pids);
        tokio::time::sleep_until(end).await;
        let b = procs::cpu_ticks(&cpu_pids);
        Some(b.saturating_sub(a))
    });
    let report = ws::run(target.ws_addr(), *wl, plan.warmup, plan.duration, |s, e| {
        let _ = tx.send((s, e));
    })
    .await;
    let ticks = cpu.await.ok().flatten();
    let cpu_ms = ticks
        .filter(|_| !pids.is_empty())
        .map(|t| t as f64 * 1000.0 / tck);
    WsRun {
        round,
        workload: wl.name,
        target: target.kind.name(),
        cpu_per_msg_us: cpu_ms
            .filter(|_| report.messages > 0)
            .map(|c| c * 1000.0 / report.messages as f64),
        cpu_ms,
        load: report,
    }
}

/// The WebSocket relay section of the report.
fn ws_report(plan: &Plan, runs: &[WsRun]) -> String {
    let mut s = String::new();
    if runs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### WebSocket relay (medians of {} interleaved round(s), {:.0} s each)\n",
        plan.rounds,
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| workload | target | msg/s | MB/s | latency p50 ms | latency p99 ms | proxy CPU/msg µs | CPU/msg vs nginx | errors |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let own = |wl: &str, t: &str, f: &dyn Fn(&WsRun) -> Option<f64>| {
        stat(
            runs.iter()
                .filter(|r| r.workload == wl && r.target == t)
                .filter_map(f)
                .collect(),
        )
    };
    // Per round, the ratio of this target's CPU/msg to nginx's.
    let vs_nginx = |wl: &str, t: &str| {
        stat(
            runs.iter()
                .filter(|r| r.workload == wl && r.target == t)
                .filter_map(|r| {
                    let n = runs
                        .iter()
                        .find(|n| n.workload == wl && n.target == "nginx" && n.round == r.round)?;
                    Some(r.cpu_per_msg_us? / n.cpu_per_msg_us.filter(|c| *c > 0.0)?)
                })
                .collect(),
        )
    };
    for wl in &plan.ws_workloads {
        for k in &plan.kinds {
            let t = k.name();
            if !runs.iter().any(|r| r.workload == wl.name && r.target == t) {
                continue;
            }
            let errors: u64 = runs
                .iter()
                .filter(|r| r.workload == wl.name && r.target == t)
                .map(|r| r.load.errors)
                .sum();
            let _ = writeln!(
                s,
                "| {} | {t} | {} | {} | {} | {} | {} | {} | {errors} |",
                wl.name,
                fmt(own(wl.name, t, &|r| Some(r.load.msgs_per_s)), 0, ""),
                fmt(own(wl.name, t, &|r| Some(r.load.mb_per_s)), 1, ""),
                fmt(own(wl.name, t, &|r| r.load.latency_p50_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.load.latency_p99_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.cpu_per_msg_us), 2, ""),
                if t == "nginx" || t == "direct" {
                    "–".into()
                } else {
                    ratio(plan, vs_nginx(wl.name, t))
                },
            );
        }
    }
    s
}

/// One HTTP/2 scenario run's record (a line of runs.jsonl).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct H2Run {
    pub round: usize,
    pub scenario: &'static str,
    pub target: &'static str,
    #[serde(flatten)]
    pub load: h2::H2Report,
    /// Connections the upstream accepted during the run.
    pub upstream_connections: usize,
    /// The most upstream connections open at once during the run.
    pub upstream_connections_peak: usize,
    /// The most streams one upstream connection had open at once (so far).
    pub max_streams_per_connection: usize,
    /// Requests tokentap recorded a pool wait for, their mean wait and the
    /// upper bound of the bucket holding the 99th percentile.
    pub pool_waits: Option<f64>,
    pub pool_wait_mean_ms: Option<f64>,
    pub pool_wait_p99_le_ms: Option<f64>,
}

/// 500 streaming clients against an h2c upstream allowing 100 streams per
/// connection: directly (a connection each) and through tokentap
/// (`http2 = "always"`), in interleaved rounds.
async fn h2_scenario(plan: &Plan, bins: &Binaries) -> Result<Vec<H2Run>, String> {
    const MAX_STREAMS: u32 = 100;
    let (up, seen) = h2::start_upstream(MAX_STREAMS).await?;
    let dir = plan.dir.join("h2");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let (port, admin) = (procs::free_port()?, procs::free_port()?);
    let conf = dir.join("tokentap.toml");
    write(
        &conf,
        &format!(
            "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\n[server]\nmax_connections = 20000\n\n[telemetry]\naccess_log = false\notlp_enabled = false\n\n[[routes]]\nname = \"h2\"\nprefix = \"/h2\"\nupstream = \"http://{up}\"\nhttp2 = \"always\"\n"
        ),
    )?;
    let mut proc = procs::Proc::spawn(
        "tokentap (h2 upstream)",
        targets::tokentap_command(&bins.tokentap, &conf, plan.place.cores.as_ref()),
        &dir.join("out.log"),
    )?;
    procs::wait_port(targets::addr(port), Duration::from_secs(20), &mut proc)?;
    let admin = targets::addr(admin);
    let mut out = Vec::new();
    for round in 1..=plan.rounds {
        for (via, name) in [(h2::Via::Direct, "direct"), (h2::Via::Proxy, "tokentap")] {
            let addr = if via == h2::Via::Direct {
                up
            } else {
                targets::addr(port)
            };
            let before = match via {
                h2::Via::Proxy => Some(h2::PoolWait::parse(&h2::scrape(admin).await?)),
                h2::Via::Direct => None,
            };
            let conns = seen.connections.load(Ordering::Relaxed);
            seen.reset_peaks();
            let load = h2::run(addr, via, plan.h2_streams, plan.warmup, plan.duration).await;
            let upstream_connections = seen.connections.load(Ordering::Relaxed) - conns;
            let waits = match before {
                Some(b) => Some(h2::PoolWait::parse(&h2::scrape(admin).await?).since(&b)),
                None => None,
            };
            let r = H2Run {
                round,
                scenario: "h2_c500_max100",
                target: name,
                load,
                upstream_connections,
                upstream_connections_peak: seen.peak_open.load(Ordering::Relaxed),
                max_streams_per_connection: seen.max_open_per_conn.load(Ordering::Relaxed),
                pool_waits: waits.map(|w| w.0),
                pool_wait_mean_ms: waits.and_then(|w| w.1),
                pool_wait_p99_le_ms: waits.and_then(|w| w.2),
            };
            eprintln!(
                "round {round} h2 c{} {:<9} {:>7} req  ttft p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  upstream conns {} (peak open {})  pool wait mean {} ms  errors {}",
                plan.h2_streams,
                name,
                r.load.requests,
                r.load.ttft_p50_ms.unwrap_or(f64::NAN),
                r.load.ttft_p99_ms.unwrap_or(f64::NAN),
                r.load.ttft_max_ms.unwrap_or(f64::NAN),
                r.upstream_connections,
                r.upstream_connections_peak,
                r.pool_wait_mean_ms
                    .map_or("-".into(), |m| format!("{m:.3}")),
                r.load.errors,
            );
            out.push(r);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    proc.stop(Duration::from_secs(5));
    Ok(out)
}

/// The HTTP/2 upstream scenario's section of the report.
fn h2_report(plan: &Plan, runs: &[H2Run]) -> String {
    let mut s = String::new();
    if runs.is_empty() {
        return s;
    }
    let _ = writeln!(
        s,
        "\n### HTTP/2 upstream: {} concurrent streams, 100 per upstream connection (medians of {} round(s), {:.0} s each)\n",
        plan.h2_streams,
        plan.rounds,
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "| target | requests | TTFT p50 ms | TTFT p99 ms | TTFT max ms | total p50 ms | total p99 ms | upstream connections opened in the run | upstream connections open (peak) | max streams on one connection | pool wait mean ms | pool wait p99 ≤ ms | errors |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for t in ["direct", "tokentap"] {
        let mine: Vec<&H2Run> = runs.iter().filter(|r| r.target == t).collect();
        let own =
            |f: &dyn Fn(&H2Run) -> Option<f64>| stat(mine.iter().filter_map(|r| f(r)).collect());
        let errors: u64 = mine.iter().map(|r| r.load.errors).sum();
        let _ = writeln!(
            s,
            "| {t} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {errors} |",
            fmt(own(&|r| Some(r.load.requests as f64)), 0, ""),
            fmt(own(&|r| r.load.ttft_p50_ms), 3, ""),
            fmt(own(&|r| r.load.ttft_p99_ms), 3, ""),
            fmt(own(&|r| r.load.ttft_max_ms), 3, ""),
            fmt(own(&|r| r.load.total_p50_ms), 1, ""),
            fmt(own(&|r| r.load.total_p99_ms), 1, ""),
            fmt(own(&|r| Some(r.upstream_connections as f64)), 0, ""),
            fmt(own(&|r| Some(r.upstream_connections_peak as f64)), 0, ""),
            mine.iter()
                .map(|r| r.max_streams_per_connection)
                .max()
                .map_or("–".into(), |m| m.to_string()),
            fmt(own(&|r| r.pool_wait_mean_ms), 4, ""),
            fmt(own(&|r| r.pool_wait_p99_le_ms), 1, ""),
        );
    }
    s
}

/// Hold many slow streams through a fresh `kind`; RSS per stream.
async fn memory_run(
    kind: Kind,
    bins: &Binaries,
    ups: &Upstreams,
    plan: &Plan,
    sink: std::net::SocketAddr,
) -> Result<Memory, String> {
    let mut target = targets::start(kind, bins, ups, &plan.dir.join("memory"), sink, &plan.place)?;
    // Warm the path once (pools, lazy statics) before the idle reading.
    let _ = fetch(target.addr(Class::Fast), Class::Fast, Api::Chat, true).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pids = target.pids();
    let idle = procs::status_kib(&pids, "VmRSS");
    procs::reset_peak(&pids);
    let n = plan.memory_streams;
    let spec = Spec {
        addr: target.addr(Class::Slow),
        path: format!("{}{}", Class::Slow.prefix(), Api::Chat.path()),
        body: Api::Chat.body(true, None),
        stream: true,
        concurrency: n,
        warmup: Duration::ZERO,
        duration: Duration::ZERO,
        ramp: 200,
        session: false,
    };
    let ready = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let hold = tokio::spawn(load::hold(spec, ready.clone(), stop_rx));
    let deadline =
        Instant::now() + Duration::from_secs(if plan.memory_streams > 1000 { 120 } else { 20 });
    while ready.load(Ordering::Relaxed) < n && Instant::now() < deadline && !hold.is_finished() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let every stream get a few more tokens through before reading RSS.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loaded = procs::status_kib(&pids, "VmRSS");
    let peak = procs::status_kib(&pids, "VmHWM");
    let _ = stop_tx.send(true);
    let (established, failed, first_error) = hold.await.map_err(|e| e.to_string())?;
    if let Some(p) = target.proc.as_mut() {
        p.stop(Duration::from_secs(5));
    }
    let per = (loaded.saturating_sub(idle)) as f64 / established.max(1) as f64;
    Ok(Memory {
        target: kind.name(),
        streams: n,
        established,
        failed,
        rss_idle_mib: idle as f64 / 1024.0,
        rss_loaded_mib: loaded as f64 / 1024.0,
        peak_rss_mib: peak as f64 / 1024.0,
        kib_per_stream: per,
        first_error,
    })
}

/// One request's response body (status must be 200).
async fn fetch(
    addr: std::net::SocketAddr,
    class: Class,
    api: Api,
    stream: bool,
) -> Result<Bytes, String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::post(format!("{}{}", class.prefix(), api.path()))
        .header(http::header::HOST, addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::AUTHORIZATION, "Bearer sk-bench-identity")
        .body(Full::new(api.body(stream, Some(20))))
        .map_err(|e| e.to_string())?;
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = res.status();
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if status != http::StatusCode::OK {
        return Err(format!("status {status}"));
    }
    Ok(body)
}

/// Blank every `"id":"…"` value. The simulator's answer id is its only
/// randomness (`sim-` + 16 hex digits), and it echoes an `x-request-id`
/// request header instead when there is one, which Envoy adds; neither
/// says anything about whether the proxy forwarded bytes unchanged.
fn normalise(body: &[u8]) -> Vec<u8> {
    const KEY: &[u8] = b"\"id\":\"";
    let mut out = Vec::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = memchr::memmem::find(rest, KEY) {
        let value = at + KEY.len();
        out.extend_from_slice(&rest[..value]);
        let end = memchr::memchr(b'"', &rest[value..]).map_or(rest.len(), |e| value + e);
        out.extend_from_slice(b"<id>");
        rest = &rest[end..];
    }
    out.extend_from_slice(rest);
    out
}

/// Fetch fixed requests directly and through each proxy; compare bodies.
async fn check_identity(targets: &[Target]) -> Identity {
    let cases: [(&'static str, Api, bool); 4] = [
        ("chat_stream", Api::Chat, true),
        ("chat_whole", Api::Chat, false),
        ("messages_stream", Api::Messages, true),
        ("messages_whole", Api::Messages, false),
    ];
    let mut out = Identity::new();
    let Some(direct) = targets.iter().find(|t| t.kind == Kind::Direct) else {
        return out;
    };
    for (name, api, stream) in cases {
        let want = fetch(direct.addr(Class::Fast), Class::Fast, api, stream)
            .await
            .map(|b| normalise(&b));
        for t in targets.iter().filter(|t| t.kind != Kind::Direct) {
            let got = fetch(t.addr(Class::Fast), Class::Fast, api, stream)
                .await
                .map(|b| normalise(&b));
            let same = matches!((&want, &got), (Ok(a), Ok(b)) if a == b);
            if !same {
                eprintln!(
                    "byte identity: {} {name} differs from direct",
                    t.kind.name()
                );
            }
            out.entry(t.kind.name()).or_default().push((name, same));
        }
    }
    out
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Median and spread ((max − min) / |median|, as a percentage) of `v`.
fn stat(mut v: Vec<f64>) -> Option<(f64, f64)> {
    let m = median(&mut v)?;
    let spread = if v.len() > 1 && m != 0.0 {
        (v[v.len() - 1] - v[0]) / m.abs() * 100.0
    } else {
        0.0
    };
    Some((m, spread))
}

/// `f(run, base run)` for each of `target`'s runs of `workload`, paired
/// with `base`'s run of the same round (a round without one is left out);
/// then median and spread.
fn per_round(
    runs: &[Run],
    workload: &str,
    target: &str,
    base: &str,
    f: &dyn Fn(&Run, &Run) -> Option<f64>,
) -> Option<(f64, f64)> {
    let in_round = |t: &str, round: usize| {
        runs.iter()
            .find(|r| r.workload == workload && r.target == t && r.round == round)
    };
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.workload == workload && r.target == target)
        .filter_map(|r| f(r, in_round(base, r.round)?))
        .collect();
    stat(v)
}

fn fmt(v: Option<(f64, f64)>, digits: usize, suffix: &str) -> String {
    match v {
        Some((m, s)) if s > 0.0 => format!("{m:.digits$}{suffix} ±{s:.0}%"),
        Some((m, _)) => format!("{m:.digits$}{suffix}"),
        None => "–".into(),
    }
}

fn report(
    plan: &Plan,
    runs: &[Run],
    memory: &[Memory],
    identity: &Identity,
    sink_note: &str,
) -> String {
    let proxies: Vec<&'static str> = plan
        .kinds
        .iter()
        .map(|k| k.name())
        .filter(|n| *n != "direct" && runs.iter().any(|r| r.target == *n))
        .collect();
    let find = |wl: &str, t: &str| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.workload == wl && r.target == t)
            .collect()
    };
    // Per round, `f(proxy run, direct run)`; then median and spread.
    let paired = |wl: &str, t: &str, f: &dyn Fn(&Run, &Run) -> Option<f64>| {
        per_round(runs, wl, t, "direct", f)
    };
    let own = |wl: &str, t: &str, f: &dyn Fn(&Run) -> Option<f64>| {
        stat(find(wl, t).iter().filter_map(|r| f(r)).collect())
    };
    let rps_ratio = |r: &Run, d: &Run| (d.load.rps > 0.0).then(|| r.load.rps / d.load.rps);
    let mut s = String::new();
    if plan.debug {
        s.push_str(DEBUG_BANNER);
    }
    let _ = writeln!(
        s,
        "### Summary (medians of {} interleaved round(s), {:.0} s each; ± = spread (max−min)/median)\n",
        plan.rounds,
        plan.duration.as_secs_f64()
    );
    let _ = writeln!(s, "| workload | {} |", proxies.join(" | "));
    let _ = writeln!(s, "|---|{}", "---|".repeat(proxies.len()));
    let mut row = |label: &str, cell: &dyn Fn(&str) -> String| {
        let cells: Vec<String> = proxies.iter().map(|p| cell(p)).collect();
        let _ = writeln!(s, "| {label} | {} |", cells.join(" | "));
    };
    for (wl, label) in [
        ("nonstream_c16", "non-streaming c16: req/s vs direct"),
        ("nonstream_c64", "non-streaming c64: req/s vs direct"),
        ("stream_c64", "streaming 100 tok c64: streams/s vs direct"),
        (
            "anthropic_stream_c64",
            "Anthropic streaming c64: streams/s vs direct",
        ),
        ("stream_c1000", "streaming c1000: streams/s vs direct"),
    ] {
        if runs.iter().any(|r| r.workload == wl) {
            row(label, &|p| ratio(plan, paired(wl, p, &rps_ratio)));
        }
    }
    let added =
        |q: fn(&Report) -> Option<f64>| move |r: &Run, d: &Run| Some(q(&r.load)? - q(&d.load)?);
    let p50 = added(|l| l.ttft_p50_ms);
    let p99 = added(|l| l.ttft_p99_ms);
    if runs.iter().any(|r| r.workload == "stream_c1") {
        row("added TTFT p50, streaming c1 (ms)", &|p| {
            fmt(paired("stream_c1", p, &p50), 3, "")
        });
    }
    if runs.iter().any(|r| r.workload == "stream_c1") {
        row("added TTFT p99, streaming c1 (ms)", &|p| {
            fmt(paired("stream_c1", p, &p99), 3, "")
        });
    }
    if runs.iter().any(|r| r.workload == "nonstream_c16") {
        // A non-streamed request's TTFT is its whole body.
        row("added p99, non-streaming c16 (ms)", &|p| {
            fmt(paired("nonstream_c16", p, &p99), 3, "")
        });
    }
    if runs.iter().any(|r| r.workload == "paced_c64") {
        row("added TTFT p99, 10 ms/token c64 (ms)", &|p| {
            fmt(paired("paced_c64", p, &p99), 3, "")
        });
    }
    if runs.iter().any(|r| r.workload == "stream_c1000") {
        row("added TTFT p99, streaming c1000 (ms)", &|p| {
            fmt(paired("stream_c1000", p, &p99), 2, "")
        });
    }
    let cpu = |r: &Run| r.cpu_per_req_ms;
    row("proxy CPU per request, non-streaming c16 (ms)", &|p| {
        fmt(own("nonstream_c16", p, &cpu), 4, "")
    });
    row("proxy CPU per 100-token stream, c64 (ms)", &|p| {
        fmt(own("stream_c64", p, &cpu), 4, "")
    });
    // Natively, a proxy's gap to nginx shows in one of the two: user time
    // follows instructions (callgrind), system time the syscalls.
    for (wl, label) in [
        (
            "nonstream_c16",
            "proxy CPU per request, non-streaming c16, user / system (ms)",
        ),
        (
            "stream_c64",
            "proxy CPU per 100-token stream, c64, user / system (ms)",
        ),
    ] {
        if runs.iter().any(|r| r.workload == wl) {
            row(label, &|p| {
                format!(
                    "{} / {}",
                    fmt(own(wl, p, &|r| r.user_per_req_ms), 4, ""),
                    fmt(own(wl, p, &|r| r.system_per_req_ms), 4, "")
                )
            });
        }
    }
    // Rounds share the machine's load, so a ratio within a round moves
    // less than either figure across rounds.
    let cpu_ratio =
        |r: &Run, base: &Run| Some(r.cpu_per_req_ms? / base.cpu_per_req_ms.filter(|&c| c > 0.0)?);
    if proxies.contains(&"nginx") {
        for (wl, label) in [
            (
                "nonstream_c16",
                "proxy CPU per request vs nginx's in the same round, non-streaming c16",
            ),
            (
                "nonstream_c64",
                "proxy CPU per request vs nginx's in the same round, non-streaming c64",
            ),
            (
                "stream_c1",
                "proxy CPU per stream vs nginx's in the same round, c1",
            ),
            (
                "stream_c64",
                "proxy CPU per stream vs nginx's in the same round, c64",
            ),
            (
                "paced_c64",
                "proxy CPU per stream vs nginx's in the same round, 10 ms/token c64",
            ),
        ] {
            if runs.iter().any(|r| r.workload == wl) {
                row(label, &|p| {
                    ratio(plan, per_round(runs, wl, p, "nginx", &cpu_ratio))
                });
            }
        }
    }
    let rss = |r: &Run| r.peak_rss_mib;
    // Round 1 runs before any c1000 run: later rounds start from the RSS
    // the allocator kept from it (shown in the next row).
    row("proxy peak RSS, streaming c64, round 1 (MiB)", &|p| {
        find("stream_c64", p)
            .iter()
            .find(|r| r.round == 1)
            .and_then(|r| r.peak_rss_mib)
            .map_or("–".into(), |m| format!("{m:.1}"))
    });
    row("proxy peak RSS, any run (MiB)", &|p| {
        runs.iter()
            .filter(|r| r.target == p)
            .filter_map(|r| r.peak_rss_mib)
            .reduce(f64::max)
            .map_or("–".into(), |m| format!("{m:.1}"))
    });
    row("memory per held slow stream (KiB)", &|p| {
        memory
            .iter()
            .find(|m| m.target == p)
            .map_or("–".into(), |m| {
                format!("{:.1} ({} streams)", m.kib_per_stream, m.established)
            })
    });
    row("response bytes identical to direct", &|p| {
        identity.get(p).map_or("–".into(), |cases| {
            if cases.iter().all(|(_, same)| *same) {
                "yes".into()
            } else {
                let bad: Vec<&str> = cases.iter().filter(|c| !c.1).map(|c| c.0).collect();
                format!("no ({})", bad.join(", "))
            }
        })
    });

    let _ = writeln!(s, "\n### Absolute figures (medians)\n");
    let _ = writeln!(
        s,
        "| workload | target | req/s | TTFT p50 ms | TTFT p99 ms | total p50 ms | total p99 ms | gap p99 ms | proxy CPU/req ms | peak RSS MiB | errors |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for wl in &plan.workloads {
        for k in &plan.kinds {
            let t = k.name();
            if find(wl.name, t).is_empty() {
                continue;
            }
            let errors: u64 = find(wl.name, t).iter().map(|r| r.load.errors).sum();
            let _ = writeln!(
                s,
                "| {} | {t} | {} | {} | {} | {} | {} | {} | {} | {} | {errors} |",
                wl.name,
                fmt(own(wl.name, t, &|r| Some(r.load.rps)), 0, ""),
                fmt(own(wl.name, t, &|r| r.load.ttft_p50_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.load.ttft_p99_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.load.total_p50_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.load.total_p99_ms), 3, ""),
                fmt(own(wl.name, t, &|r| r.load.gap_p99_ms), 3, ""),
                fmt(own(wl.name, t, &cpu), 4, ""),
                fmt(own(wl.name, t, &rss), 1, ""),
            );
        }
    }
    if !memory.is_empty() {
        let _ = writeln!(s, "\n### Memory: held slow streams (1 token/s)\n");
        let _ = writeln!(
            s,
            "| target | streams held | failed | RSS idle MiB | RSS loaded MiB | peak MiB | KiB per stream |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for m in memory {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                m.target,
                m.established,
                m.failed,
                m.rss_idle_mib,
                m.rss_loaded_mib,
                m.peak_rss_mib,
                m.kib_per_stream
            );
        }
    }
    let _ = writeln!(s, "\n{sink_note}.");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(round: usize, workload: &'static str, target: &'static str, cpu: f64) -> Run {
        Run {
            round,
            workload,
            target,
            load: Report::default(),
            cpu_ms: None,
            cpu_per_req_ms: Some(cpu),
            user_per_req_ms: None,
            system_per_req_ms: None,
            peak_rss_mib: None,
        }
    }

    fn args(line: &[&str]) -> SuiteArgs {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            suite: SuiteArgs,
        }
        <Cli as clap::Parser>::try_parse_from(std::iter::once("suite").chain(line.iter().copied()))
            .expect("flags parse")
            .suite
    }

    /// A debug build's report opens by saying it is no performance figure
    /// and prints no ratio; a release build's prints them.
    #[test]
    fn a_debug_build_prints_no_ratio() {
        let report_of = |dir: &str| {
            let bins = Binaries {
                tokentap: PathBuf::from(format!("{dir}/tokentap")),
                nginx: None,
                envoy: None,
            };
            let plan = plan(
                &args(&["--quick", "--targets", "direct,tokentap"]),
                &bins,
                &Placement::default(),
            )
            .expect("plan");
            let with_rps = |target: &'static str, rps: f64| {
                let mut r = run(1, "nonstream_c16", target, 0.1);
                r.load.rps = rps;
                r
            };
            let runs = [with_rps("direct", 1000.0), with_rps("tokentap", 290.0)];
            report(&plan, &runs, &[], &Identity::new(), "")
        };
        let debug = report_of("target/debug");
        assert!(
            debug.contains("not performance figures") && debug.contains("– (debug build)"),
            "the debug report says what it is:\n{debug}"
        );
        assert!(
            !debug.contains('×'),
            "no ratio from a debug build:\n{debug}"
        );
        let release = report_of("target/release");
        assert!(
            release.contains("0.29×") && !release.contains("debug build"),
            "a release build's report prints the ratio:\n{release}"
        );
    }

    #[test]
    fn pinned_passes_take_the_first_n_proxy_cores_with_n_workers() {
        let pin = Pinning::split(
            &Cores::parse("0-15").expect("cores"),
            &Cores::parse("0-3").expect("cores"),
            None,
        )
        .expect("split");
        let one = placements(&args(&["--proxy-cores", "0-3"]), Some(&pin)).expect("one pass");
        assert_eq!(one.len(), 1);
        assert_eq!(
            one[0].cores.as_ref().map(Cores::list).as_deref(),
            Some("0-3")
        );
        assert_eq!(one[0].workers, Some(4), "one worker per pinned core");
        let w2 = placements(
            &args(&["--proxy-cores", "0-3", "--workers", "2"]),
            Some(&pin),
        )
        .expect("one pass");
        assert_eq!(w2[0].workers, Some(2), "--workers overrides");
        let sc = placements(
            &args(&["--proxy-cores", "0-3", "--scale", "1,2,4"]),
            Some(&pin),
        )
        .expect("three passes");
        let got: Vec<(String, Option<usize>)> = sc
            .iter()
            .map(|p| {
                (
                    p.cores.as_ref().map(Cores::list).unwrap_or_default(),
                    p.workers,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("0".to_owned(), Some(1)),
                ("0-1".to_owned(), Some(2)),
                ("0-3".to_owned(), Some(4))
            ]
        );
        for bad in ["0", "5"] {
            let a = args(&["--proxy-cores", "0-3", "--scale", bad]);
            assert!(placements(&a, Some(&pin)).is_err(), "--scale {bad} refused");
        }
        let free = placements(&args(&[]), None).expect("unpinned");
        assert!(free[0].cores.is_none() && free[0].workers.is_none());
        assert!(
            <SuiteArgsOnly as clap::Parser>::try_parse_from(["suite", "--load-cores", "1"])
                .is_err(),
            "--load-cores without --proxy-cores is refused"
        );
    }

    #[derive(clap::Parser)]
    struct SuiteArgsOnly {
        #[command(flatten)]
        _suite: SuiteArgs,
    }

    #[test]
    fn same_round_ratios_pair_each_round_with_its_own_base() {
        let runs = [
            run(1, "w", "nginx", 1.0),
            run(1, "w", "tokentap", 1.5),
            run(2, "w", "nginx", 2.0),
            run(2, "w", "tokentap", 2.4),
            run(3, "w", "nginx", 1.0),
            run(3, "w", "tokentap", 1.4),
            run(3, "other", "nginx", 9.0),
            // No base in round 4: left out, not divided by another round's.
            run(4, "w", "tokentap", 9.0),
        ];
        let ratio = |r: &Run, base: &Run| Some(r.cpu_per_req_ms? / base.cpu_per_req_ms?);
        let (median, spread) =
            per_round(&runs, "w", "tokentap", "nginx", &ratio).expect("three rounds");
        assert!(
            (median - 1.4).abs() < 1e-9,
            "ratios 1.5, 1.2, 1.4: {median}"
        );
        assert!(
            (spread - (1.5 - 1.2) / 1.4 * 100.0).abs() < 1e-9,
            "{spread}"
        );
        assert_eq!(per_round(&runs, "w", "envoy", "nginx", &ratio), None);
    }
}
