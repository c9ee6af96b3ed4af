//! The soak: a duration and a concurrency in; a scripted upstream with
//! random faults, a real tokentap process in front of it exporting spans to
//! an in-process OTLP receiver, and a load client that cancels some
//! requests and checks every byte, all driven at steady load; a Markdown
//! report (byte mismatches, requests vs measurements by outcome, tokentap's
//! memory and CPU) and a failing exit status when an invariant broke, out.
//! Everything listens on 127.0.0.1; only the tokentap it started is
//! stopped, by PID.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokentap::simulate::{at_least_one_arg, non_negative_arg};
use tokio::time::Instant;

use crate::procs::{self, Proc, free_port, wait_port};
use crate::targets::{self, addr};

mod client;
mod prom;
mod script;
mod spans;
mod upstream;

use client::{Seen, Shared};
use script::Kind;
use spans::Spans;

/// `tokentap-bench soak` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SoakArgs {
    /// How long to drive load (e.g. 30m, 2m, 20s)
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Requests in flight at once (one per connection; ≥ 1)
    #[arg(long, default_value_t = 24, value_parser = at_least_one_arg::<usize>)]
    pub concurrency: usize,
    /// Seed of the scripted exchanges (default: from the clock); the same
    /// seed gives the same sequence of exchanges
    #[arg(long)]
    pub seed: Option<u64>,
    /// Time between progress lines
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub progress: Duration,
    /// Time between scrapes of tokentap's `/metrics` during the load, as a
    /// Prometheus server would (0 = only at the end)
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub scrape_every: Duration,
    /// Largest allowed growth of tokentap's RSS from the end of warm-up to
    /// the end of the load, in MiB
    #[arg(long, default_value_t = 32.0, value_parser = non_negative_arg)]
    pub max_rss_growth_mib: f64,
    /// Directory for results (a timestamped folder is made inside)
    #[arg(long, default_value = "target/soak-results")]
    pub out: PathBuf,
    /// Directory holding the `tokentap` binary (default: next to this binary)
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
}

/// The route prefix the client uses.
const PREFIX: &str = "/soak";
/// Longest wait for the last measurements after the load stops.
const SETTLE: Duration = Duration::from_secs(30);

/// tokentap's memory over the run, in KiB.
#[derive(Debug, Default, Clone, Copy)]
struct Rss {
    start: u64,
    warm: u64,
    peak: u64,
    /// When the load stops (the figure compared with `warm`).
    end: u64,
    /// After the last requests finished and the counter settled.
    drained: u64,
}

pub(crate) async fn run(args: SoakArgs) -> Result<(), String> {
    let tokentap = targets::tokentap_bin(args.bin_dir.as_deref())?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let dir = args.out.join(format!("soak-{}", stamp.as_secs()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let seed = args.seed.unwrap_or(stamp.as_nanos() as u64);
    let nonce = fastrand::u64(1..);
    eprintln!(
        "soak: {:?} at concurrency {}, seed {seed}; results in {}",
        args.duration,
        args.concurrency,
        dir.display()
    );

    let (up_addr, served) = upstream::start(seed)
        .await
        .map_err(|e| format!("scripted upstream: {e}"))?;
    let spans = Arc::new(Spans::new(nonce));
    let hook_spans = spans.clone();
    let (otlp_addr, _sink) = crate::sink::start_with(
        addr(0),
        Arc::new(move |path: &str, body: &[u8]| hook_spans.on_export(path, body)),
    )
    .await
    .map_err(|e| format!("OTLP receiver: {e}"))?;
    let (port, admin_port) = (free_port()?, free_port()?);
    let mut proc = start_tokentap(&tokentap, &dir, port, admin_port, up_addr, otlp_addr)?;
    let pids = vec![proc.pid()];
    let tck = procs::clk_tck();

    let mut rss = Rss {
        start: procs::status_kib(&pids, "VmRSS"),
        ..Rss::default()
    };
    rss.peak = rss.start;
    let cpu0 = procs::cpu_ticks(&pids);
    let shared = Shared::new(seed, nonce);
    let started = Instant::now();
    let load = tokio::spawn(client::run(
        addr(port),
        PREFIX,
        args.concurrency,
        shared.clone(),
    ));
    let warm_at = (args.duration / 4).min(Duration::from_secs(60));
    let mut died = None;
    // (seconds into the load, VmRSS KiB) at each progress line.
    let mut samples = Vec::new();
    let mut next_progress = started + args.progress;
    let admin = addr(admin_port);
    let mut next_scrape = started + args.scrape_every;
    let mut counted = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while started.elapsed() < args.duration {
        tick.tick().await;
        let now_kib = procs::status_kib(&pids, "VmRSS");
        rss.peak = rss.peak.max(now_kib);
        if rss.warm == 0 && started.elapsed() >= warm_at {
            rss.warm = now_kib;
        }
        if !proc.alive() {
            died = Some(started.elapsed());
            break;
        }
        if !args.scrape_every.is_zero() && Instant::now() >= next_scrape {
            next_scrape += args.scrape_every;
            counted = prom::scrape(admin).await.map(|s| s.total()).ok();
        }
        if Instant::now() >= next_progress {
            next_progress += args.progress;
            samples.push((started.elapsed().as_secs(), now_kib));
            progress(
                &shared,
                &spans,
                counted,
                started,
                now_kib,
                procs::cpu_ticks(&pids) - cpu0,
                tck,
            );
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let load_secs = started.elapsed().as_secs_f64();
    rss.end = procs::status_kib(&pids, "VmRSS");
    // Requests in flight finish (bounded by the client's request timeout).
    let _ = tokio::time::timeout(client::REQUEST_TIMEOUT + Duration::from_secs(5), load).await;
    let sent = shared.sent.load(Ordering::Relaxed);
    let cpu_ticks = procs::cpu_ticks(&pids).saturating_sub(cpu0);

    // The counter first (a measurement still being counted by the tokenizer
    // arrives a little later), then a graceful stop, which flushes spans.
    let mut scrape = prom::Scrape::default();
    let until = Instant::now() + SETTLE;
    while died.is_none() && Instant::now() < until {
        match prom::scrape(admin).await {
            Ok(s) => {
                let done = s.total() >= sent && s.streams_active == 0;
                scrape = s;
                if done {
                    break;
                }
            }
            Err(e) => eprintln!("soak: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    rss.drained = procs::status_kib(&pids, "VmRSS");
    rss.peak = rss.peak.max(procs::status_kib(&pids, "VmHWM"));
    let exit = tokio::task::spawn_blocking(move || proc.terminate(Duration::from_secs(40)))
        .await
        .ok()
        .flatten();
    let until = Instant::now() + SETTLE;
    let mut last = (spans.total.load(Ordering::Relaxed), Instant::now());
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let n = spans.total.load(Ordering::Relaxed);
        if n != last.0 {
            last = (n, Instant::now());
        } else if (n >= sent && last.1.elapsed() > Duration::from_secs(1))
            || last.1.elapsed() > Duration::from_secs(5)
        {
            break;
        }
    }

    let facts = Facts {
        args: &args,
        seed,
        load_secs,
        sent,
        shared: &shared,
        spans: &spans,
        scrape: &scrape,
        served: served.requests.load(Ordering::Relaxed),
        rss,
        samples,
        cpu_s: cpu_ticks as f64 / tck,
        exit,
        died,
    };
    let (report, failures) = report(&facts);
    let path = dir.join("report.md");
    std::fs::write(&path, &report).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("{report}");
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("soak failed: {}", failures.join("; ")))
    }
}

/// Write tokentap's configuration and start it; returns once it listens.
fn start_tokentap(
    bin: &Path,
    dir: &Path,
    port: u16,
    admin_port: u16,
    upstream: SocketAddr,
    otlp: SocketAddr,
) -> Result<Proc, String> {
    let idle = humantime::format_duration(script::IDLE_TIMEOUT);
    let conf = format!(
        "listen = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\n[server]\nshutdown_grace = \"10s\"\n\n[upstream]\nidle_timeout = \"{idle}\"\n\n[tenant]\nsources = [\"header\", \"api_key\"]\nsalt = \"soak-salt\"\n\n[telemetry]\naccess_log = false\notlp_enabled = true\notlp_endpoint = \"http://{otlp}\"\notlp_protocol = \"http/protobuf\"\nmetrics_export_interval = \"10s\"\n\n[[routes]]\nname = \"soak\"\nprefix = \"{PREFIX}\"\nupstream = \"http://{upstream}\"\n"
    );
    let path = dir.join("tokentap.toml");
    std::fs::write(&path, conf).map_err(|e| format!("{}: {e}", path.display()))?;
    let cmd = targets::tokentap_command(bin, &path, None);
    let mut proc = Proc::spawn("tokentap", cmd, &dir.join("tokentap.log"))?;
    wait_port(addr(port), Duration::from_secs(20), &mut proc)?;
    wait_port(addr(admin_port), Duration::from_secs(20), &mut proc)?;
    Ok(proc)
}

fn progress(
    shared: &Shared,
    spans: &Spans,
    counted: Option<u64>,
    started: Instant,
    rss_kib: u64,
    ticks: u64,
    tck: f64,
) {
    let secs = started.elapsed().as_secs_f64();
    let sent = shared.sent.load(Ordering::Relaxed);
    eprintln!(
        "soak {:>6.0} s: {sent} requests ({:.0}/s), {} finished, {} byte mismatches, {} unexpected, {} spans received, counter {} at the last scrape, tokentap RSS {:.1} MiB, CPU {:.0} %",
        secs,
        sent as f64 / secs,
        shared.finished.load(Ordering::Relaxed),
        shared.mismatches.load(Ordering::Relaxed),
        shared.unexpected.load(Ordering::Relaxed),
        spans.total.load(Ordering::Relaxed),
        counted.map_or("-".to_owned(), |n| n.to_string()),
        rss_kib as f64 / 1024.0,
        ticks as f64 / tck / secs * 100.0,
    );
}

/// Everything the report is made of.
struct Facts<'a> {
    args: &'a SoakArgs,
    seed: u64,
    load_secs: f64,
    sent: u64,
    shared: &'a Shared,
    spans: &'a Spans,
    scrape: &'a prom::Scrape,
    served: u64,
    rss: Rss,
    samples: Vec<(u64, u64)>,
    cpu_s: f64,
    exit: Option<std::process::ExitStatus>,
    died: Option<Duration>,
}

/// Requests matched with their spans.
#[derive(Default)]
struct Matching {
    /// Requests with no span.
    lost: Vec<u64>,
    /// Requests with more than one span.
    duplicated: Vec<u64>,
    /// Spans whose outcome is not the one the script calls for.
    wrong_outcome: Vec<String>,
    wrong_count: u64,
    /// Scripted client cancels measured `complete`: the last bytes were
    /// already forwarded when the client left (a race, not a fault).
    cancel_raced: u64,
    /// (kind, measured outcome, error.type) → count.
    by_kind: BTreeMap<(Kind, String, String), u64>,
    /// (outcome, error.type) → spans.
    by_outcome: BTreeMap<(String, String), u64>,
}

fn match_spans(f: &Facts<'_>) -> Matching {
    let mut m = Matching::default();
    let records = f
        .shared
        .records
        .lock()
        .map(|r| r.clone())
        .unwrap_or_default();
    let spans = f.spans.by_seq.lock().map(|s| s.clone()).unwrap_or_default();
    for rec in &records {
        let Some(list) = spans.get(&rec.seq) else {
            m.lost.push(rec.seq);
            continue;
        };
        if list.len() > 1 {
            m.duplicated.push(rec.seq);
        }
        for s in list {
            let err = s.error_type.clone().unwrap_or_default();
            *m.by_kind
                .entry((rec.kind, s.outcome.clone(), err.clone()))
                .or_insert(0) += 1;
            *m.by_outcome
                .entry((s.outcome.clone(), err.clone()))
                .or_insert(0) += 1;
            if s.outcome == rec.kind.outcome() {
                continue;
            }
            if rec.kind.outcome() == "client_cancelled" && s.outcome == "complete" {
                m.cancel_raced += 1;
                continue;
            }
            m.wrong_count += 1;
            if m.wrong_outcome.len() < 10 {
                m.wrong_outcome.push(format!(
                    "request {} ({}, client saw {}): measured {} / {}, expected {}",
                    rec.seq,
                    rec.kind.name(),
                    rec.seen.name(),
                    s.outcome,
                    if err.is_empty() { "-" } else { &err },
                    rec.kind.outcome()
                ));
            }
        }
    }
    m
}

fn report(f: &Facts<'_>) -> (String, Vec<String>) {
    let m = match_spans(f);
    let counts = f.shared.counts();
    let mismatches = f.shared.mismatches.load(Ordering::Relaxed);
    let unexpected = f.shared.unexpected.load(Ordering::Relaxed);
    let send_errors: u64 = counts
        .iter()
        .filter(|((_, s), _)| *s == Seen::SendError)
        .map(|(_, n)| n)
        .sum();
    let spans_total = f.spans.total.load(Ordering::Relaxed);
    let foreign = f.spans.foreign.load(Ordering::Relaxed);
    let decode_errors = f.spans.decode_errors.load(Ordering::Relaxed);
    let prom_total = f.scrape.total();
    let mib = |k: u64| k as f64 / 1024.0;
    let growth = mib(f.rss.end.saturating_sub(f.rss.warm));

    let mut fail = Vec::new();
    if let Some(t) = f.died {
        fail.push(format!("tokentap exited during the load, after {t:?}"));
    }
    if mismatches > 0 {
        fail.push(format!("{mismatches} responses with byte mismatches"));
    }
    if unexpected > 0 {
        fail.push(format!(
            "{unexpected} requests with an unexpected client result"
        ));
    }
    if spans_total != f.sent || !m.lost.is_empty() || !m.duplicated.is_empty() || foreign > 0 {
        fail.push(format!(
            "{} requests but {spans_total} spans ({} requests without a span, {} with several, {foreign} foreign)",
            f.sent,
            m.lost.len(),
            m.duplicated.len()
        ));
    }
    if prom_total != f.sent {
        fail.push(format!(
            "{} requests but tokentap_requests_total = {prom_total}",
            f.sent
        ));
    }
    if m.wrong_count > 0 {
        fail.push(format!("{} spans with the wrong outcome", m.wrong_count));
    }
    if decode_errors > 0 {
        fail.push(format!(
            "{decode_errors} trace exports could not be decoded"
        ));
    }
    if growth > f.args.max_rss_growth_mib {
        fail.push(format!(
            "RSS grew {growth:.1} MiB after warm-up (bound {} MiB)",
            f.args.max_rss_growth_mib
        ));
    }
    if !f.exit.is_some_and(|s| s.success()) {
        fail.push(format!("tokentap's exit after SIGTERM: {:?}", f.exit));
    }

    let yes = |b: bool| if b { "yes" } else { "**NO**" };
    let mut r = String::new();
    let _ = writeln!(r, "# tokentap soak\n");
    let _ = writeln!(
        r,
        "{:.0} s of load at concurrency {}, seed {} (replay with `--seed {}`).\n",
        f.load_secs, f.args.concurrency, f.seed, f.seed
    );
    let _ = writeln!(r, "| figure | value |\n|---|---|");
    let rows: Vec<(&str, String)> = vec![
        (
            "requests sent",
            format!("{} ({:.1}/s)", f.sent, f.sent as f64 / f.load_secs),
        ),
        ("requests the upstream received", f.served.to_string()),
        ("spans received (measurements)", spans_total.to_string()),
        (
            "`tokentap_requests_total` (Prometheus)",
            prom_total.to_string(),
        ),
        (
            "requests == spans == counter",
            yes(spans_total == f.sent
                && prom_total == f.sent
                && m.lost.is_empty()
                && m.duplicated.is_empty())
            .to_owned(),
        ),
        (
            "requests without a span / with several",
            format!("{} / {}", m.lost.len(), m.duplicated.len()),
        ),
        ("spans with the wrong outcome", m.wrong_count.to_string()),
        (
            "client cancels measured `complete` (race)",
            m.cancel_raced.to_string(),
        ),
        ("byte mismatches", mismatches.to_string()),
        ("unexpected client results", unexpected.to_string()),
        ("send errors (included above)", send_errors.to_string()),
        (
            "connect errors",
            f.shared.connect_errors.load(Ordering::Relaxed).to_string(),
        ),
        (
            "telemetry dropped (spans / metric points)",
            format!("{} / {}", f.scrape.dropped_spans, f.scrape.dropped_metrics),
        ),
        (
            "trace / metric exports received",
            format!(
                "{} / {}",
                f.spans.trace_exports.load(Ordering::Relaxed),
                f.spans.metric_exports.load(Ordering::Relaxed)
            ),
        ),
        (
            "tokentap RSS at start / after warm-up / end of load / after drain",
            format!(
                "{:.1} / {:.1} / {:.1} / {:.1} MiB",
                mib(f.rss.start),
                mib(f.rss.warm),
                mib(f.rss.end),
                mib(f.rss.drained)
            ),
        ),
        (
            "tokentap peak RSS (VmHWM)",
            format!("{:.1} MiB", mib(f.rss.peak)),
        ),
        (
            "RSS growth from warm-up to end of load",
            format!("{growth:.1} MiB (bound {} MiB)", f.args.max_rss_growth_mib),
        ),
        (
            "tokentap CPU time",
            format!(
                "{:.1} s ({:.0} % of one core, {:.3} ms per request)",
                f.cpu_s,
                f.cpu_s / f.load_secs * 100.0,
                f.cpu_s * 1000.0 / f.sent.max(1) as f64
            ),
        ),
        (
            "tokentap exit after SIGTERM",
            f.exit
                .map_or("killed / unknown".to_owned(), |s| s.to_string()),
        ),
    ];
    for (k, v) in rows {
        let _ = writeln!(r, "| {k} | {v} |");
    }

    if !f.samples.is_empty() {
        // At most a dozen or so points, evenly spaced.
        let step = f.samples.len().div_ceil(12);
        let points: Vec<String> = f
            .samples
            .iter()
            .step_by(step)
            .chain(
                f.samples
                    .last()
                    .filter(|_| (f.samples.len() - 1) % step != 0),
            )
            .map(|(t, k)| format!("{t} s: {:.1}", mib(*k)))
            .collect();
        let _ = writeln!(
            r,
            "\ntokentap RSS during the load (MiB): {}.",
            points.join(", ")
        );
    }
    let _ = writeln!(
        r,
        "\n## By scripted case\n\n| case | expected outcome | requests | client saw | measured (outcome / error.type) |\n|---|---|---|---|---|"
    );
    let mut kinds: BTreeMap<Kind, (u64, Vec<String>)> = BTreeMap::new();
    for ((kind, seen), n) in &counts {
        let e = kinds.entry(*kind).or_default();
        e.0 += n;
        e.1.push(format!("{} {n}", seen.name()));
    }
    for (kind, (n, seen)) in &kinds {
        let measured: Vec<String> = m
            .by_kind
            .iter()
            .filter(|((k, _, _), _)| k == kind)
            .map(|((_, o, e), c)| {
                if e.is_empty() {
                    format!("{o} {c}")
                } else {
                    format!("{o} / {e} {c}")
                }
            })
            .collect();
        let _ = writeln!(
            r,
            "| {} | {} | {n} | {} | {} |",
            kind.name(),
            kind.outcome(),
            seen.join(", "),
            measured.join(", ")
        );
    }

    let _ = writeln!(
        r,
        "\n## Measurements by outcome\n\n| outcome | error.type | spans | `tokentap_requests_total` |\n|---|---|---|---|"
    );
    let mut keys: Vec<&(String, String)> = m.by_outcome.keys().collect();
    keys.extend(f.scrape.requests.keys());
    keys.sort();
    keys.dedup();
    for k in keys {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} |",
            k.0,
            if k.1.is_empty() { "-" } else { &k.1 },
            m.by_outcome.get(k).copied().unwrap_or(0),
            f.scrape.requests.get(k).copied().unwrap_or(0)
        );
    }

    let problems = f
        .shared
        .problems
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    if !problems.is_empty() || !m.wrong_outcome.is_empty() || !m.lost.is_empty() {
        let _ = writeln!(r, "\n## First problems\n");
        for p in problems.iter().chain(&m.wrong_outcome) {
            let _ = writeln!(r, "- {p}");
        }
        if !m.lost.is_empty() {
            let first: Vec<String> = m.lost.iter().take(10).map(u64::to_string).collect();
            let _ = writeln!(r, "- requests without a span: {}", first.join(", "));
        }
    }
    let _ = writeln!(
        r,
        "\n**Verdict: {}**",
        if fail.is_empty() {
            "pass".to_owned()
        } else {
            format!("FAIL: {}", fail.join("; "))
        }
    );
    (r, fail)
}
