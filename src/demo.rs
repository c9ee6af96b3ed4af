//! `tokentap demo`: the built-in simulated provider, tokentap in front of
//! it, and a small traffic generator, with a live table of what tokentap
//! measures. A first look on a machine with no API key and no network.

use std::io::{IsTerminal, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::BodyExt;
use tokio::net::TcpListener;

use crate::app::{self, Running};
use crate::config;
use crate::simulate::{self, Simulator};
use crate::upstream::Client;
use crate::watch::live::{SeriesFilter, WindowStats};

/// `tokentap demo` flags (`--listen` and `--admin-listen` apply too).
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct DemoArgs {
    /// Requests in flight at once (≥ 1)
    #[arg(long, default_value_t = 6, value_parser = crate::simulate::at_least_one_arg::<usize>)]
    pub concurrency: usize,
    /// Stop after this many seconds (≥ 1; default: run until Ctrl-C)
    #[arg(long, value_parser = crate::simulate::at_least_one_arg::<u64>)]
    pub duration: Option<u64>,
}

/// How long requests in flight may run on once the demo stops.
const SETTLE: Duration = Duration::from_millis(400);

const TENANTS: [&str; 3] = ["team-search", "team-chat", "team-batch"];

/// The agent sessions the demo traffic belongs to: one request in
/// [`SESSION_EVERY`] carries one of them, in the header the agent that
/// would send it uses (so the dashboard's "Agent sessions" view has rows).
const SESSIONS: [&str; 4] = [
    "demo-agent-refactor",
    "demo-agent-bugfix",
    "demo-agent-docs",
    "demo-agent-tests",
];
/// One request in this many belongs to an agent session.
const SESSION_EVERY: usize = 2;

/// The window of the table's rows.
const TABLE_WINDOW: Duration = Duration::from_secs(60);

/// Made-up prices for the simulated models, USD per million tokens (input,
/// output): config overrides of the demo's own, so no real model's price
/// changes. The table and the dashboard say they are demo prices.
const DEMO_PRICES: [(&str, f64, f64); 3] = [
    ("sim-gpt-fast", 0.15, 0.60),
    ("sim-gpt-large", 2.50, 10.00),
    ("sim-claude", 3.00, 15.00),
];

/// What the dashboard says beside the cost figures.
const PRICE_NOTE: &str = "demo prices: made up for the simulated models (tokentap demo), \
    not any provider's";

/// Run the demo until Ctrl-C or `--duration`; the proxy listens on `listen`
/// and the dashboard on `admin` (`None` = off).
#[allow(
    clippy::disallowed_methods,
    reason = "demo `--duration` deadline, settle time and run time, not measurements"
)]
pub async fn run(
    args: DemoArgs,
    listen: SocketAddr,
    admin: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let sim_listener = TcpListener::bind("127.0.0.1:0").await?;
    let sim_addr = sim_listener.local_addr()?;
    let models: Vec<(String, simulate::Profile)> = simulate::demo_models()
        .into_iter()
        .map(|(m, p)| (m.to_owned(), p))
        .collect();
    let names: Vec<String> = models.iter().map(|(m, _)| m.clone()).collect();
    tokio::spawn(simulate::serve(
        sim_listener,
        Simulator::new(simulate::Profile::default(), models),
    ));

    let running = start_proxy(listen, admin, sim_addr).await?;
    running.telemetry().live().set_cost_note(PRICE_NOTE);
    let proxy = running.addr;
    println!("tokentap demo: simulated provider on http://{sim_addr}, tokentap on http://{proxy}");
    match running.admin_addr {
        Some(admin) => println!("dashboard: http://{admin}/   metrics: http://{admin}/metrics"),
        None => println!("(admin listener unavailable: its address is taken)"),
    }
    println!(
        "try: curl -N http://{proxy}/openai/v1/chat/completions -d '{{\"model\":\"sim-gpt-fast\",\"stream\":true}}'"
    );
    println!(
        "prices: made-up demo prices for the simulated models (USD per million tokens in/out: {})",
        DEMO_PRICES
            .iter()
            .map(|(m, i, o)| format!("{m} {i:.2}/{o:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();

    let started = std::time::Instant::now();
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let client = Client::internal(
        Duration::from_secs(5),
        crate::upstream::Egress::default(),
        &crate::upstream::ClientTls::default(),
    )?;
    let workers: Vec<_> = (0..args.concurrency.max(1))
        .map(|i| {
            let worker = Generator {
                client: client.clone(),
                proxy,
                models: names.clone(),
                sent: sent.clone(),
                stop: stop.clone(),
            };
            tokio::spawn(worker.run(i))
        })
        .collect();

    let interactive = std::io::stdout().is_terminal();
    let deadline = args
        .duration
        .map(|s| tokio::time::Instant::now() + Duration::from_secs(s));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => break,
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break;
        }
        if interactive {
            print!("\x1b[H\x1b[2J");
            println!(
                "tokentap demo — Ctrl-C to stop   proxy http://{proxy}   dashboard http://{}/\n",
                running
                    .admin_addr
                    .map_or_else(|| "-".to_owned(), |a| a.to_string())
            );
            print_table(
                &running,
                &names,
                sent.load(Ordering::Relaxed),
                started.elapsed(),
            );
        }
    }
    // Requests in flight get a moment to finish, then are cut: `--duration`
    // ends the demo within a second of it (a cut request counts as cancelled).
    stop.store(true, Ordering::Relaxed);
    let settle = tokio::time::Instant::now() + SETTLE;
    for mut w in workers {
        if tokio::time::timeout_at(settle, &mut w).await.is_err() {
            w.abort();
        }
    }
    if interactive {
        print!("\x1b[H\x1b[2J");
    }
    println!("tokentap demo — final figures\n");
    print_table(
        &running,
        &names,
        sent.load(Ordering::Relaxed),
        started.elapsed(),
    );
    // Its idle keep-alive connections would otherwise wait for the drain.
    drop(client);
    running.shutdown().await;
    Ok(())
}

async fn start_proxy(
    listen: SocketAddr,
    admin: Option<SocketAddr>,
    sim: SocketAddr,
) -> anyhow::Result<Running> {
    // Left unset without an endpoint, so the start-up line gives the true
    // reason export is off (no collector configured), not a switch the
    // user never set.
    let otlp = if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        "otlp_enabled = true"
    } else {
        ""
    };
    let prices: String = DEMO_PRICES
        .iter()
        .map(|(model, input, output)| {
            format!("[[prices]]\nmodel = \"{model}\"\ninput = {input}\noutput = {output}\n")
        })
        .collect();
    let toml = |listen: SocketAddr, admin: Option<SocketAddr>| {
        let admin = admin.map_or_else(|| "off".to_owned(), |a| a.to_string());
        format!(
            r#"
listen = "{listen}"
admin_listen = "{admin}"
[telemetry]
{otlp}
access_log = false
[live]
bucket = "1s"
window = "10m"
[[routes]]
name = "openai"
prefix = "/openai"
upstream = "http://{sim}"
provider = "openai"
[[routes]]
name = "anthropic"
prefix = "/anthropic"
upstream = "http://{sim}"
provider = "anthropic"
{prices}"#
        )
    };
    let config = config::from_toml(&toml(listen, admin))?;
    match app::start(config).await {
        Ok(r) => Ok(r),
        Err(e) => {
            // Default ports taken (another tokentap?): any free ones will do.
            eprintln!("tokentap demo: {e:#}; using free ports instead");
            let any: SocketAddr = ([127, 0, 0, 1], 0).into();
            Ok(app::start(config::from_toml(&toml(any, admin.map(|_| any)))?).await?)
        }
    }
}

/// One traffic worker's handles.
struct Generator {
    client: Client,
    proxy: SocketAddr,
    models: Vec<String>,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Generator {
    /// Streamed requests, round-robin over the models and tenants, until stopped.
    async fn run(self, worker: usize) {
        let mut n = worker;
        while !self.stop.load(Ordering::Relaxed) {
            let model = &self.models[n % self.models.len()];
            let tenant = TENANTS[(n / self.models.len()) % TENANTS.len()];
            let session =
                (n % SESSION_EVERY == 0).then(|| SESSIONS[(n / SESSION_EVERY) % SESSIONS.len()]);
            if let Ok(req) = self.request(model, tenant, session, n % 2 == 0) {
                if let Ok(res) = self.client.send_bytes(req).await {
                    let _ = res.into_body().collect().await;
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            n += 1;
            tokio::time::sleep(Duration::from_millis(fastrand::u64(20..200))).await;
        }
    }

    fn request(
        &self,
        model: &str,
        tenant: &str,
        session: Option<&str>,
        usage: bool,
    ) -> Result<Request<Bytes>, http::Error> {
        let ask = r#""messages":[{"role":"user","content":"Tell me about latency."}]"#;
        let claude = model.contains("claude");
        let (path, body) = if claude {
            (
                "/anthropic/v1/messages",
                format!(r#"{{"model":"{model}","max_tokens":256,"stream":true,{ask}}}"#),
            )
        } else {
            let opts = format!(r#""stream_options":{{"include_usage":{usage}}}"#);
            (
                "/openai/v1/chat/completions",
                format!(r#"{{"model":"{model}","stream":true,{opts},{ask}}}"#),
            )
        };
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{}{path}", self.proxy))
            .header("content-type", "application/json")
            .header("x-tenant-id", tenant);
        if let Some(id) = session {
            // The header Claude Code sends, or Codex's.
            let header = if claude {
                "x-claude-code-session-id"
            } else {
                "session_id"
            };
            req = req.header(header, id);
        }
        req.body(Bytes::from(body))
    }
}

/// The table: one row per model over the last [`TABLE_WINDOW`] (said in its
/// first line), then the totals since the demo started (said in the footer).
fn print_table(running: &Running, models: &[String], sent: u64, ran: Duration) {
    let snap = running.telemetry().live().snapshot();
    let mut out = String::new();
    let mut total = 0;
    let mut rows = String::new();
    for model in models {
        let w = snap.window(&SeriesFilter::any().model_exact(model), TABLE_WINDOW);
        total += w.requests;
        rows.push_str(&row(model, &w));
    }
    // Before the window fills, it is the time since start.
    let window = TABLE_WINDOW.min(ran).as_secs().max(1);
    out.push_str(&format!("per model, last {window} s:\n"));
    out.push_str(&format!(
        "{:<16} {:>8} {:>8} {:>11} {:>11} {:>11} {:>10} {:>8}\n",
        "model", "requests", "req/s", "TTFT p50", "TTFT p95", "tok/s p50", "max stall", "errors"
    ));
    out.push_str(&rows);
    out.push_str(&format!(
        "{:<16} {:>8}\n\n{sent} answers received through tokentap since the demo started {} s ago\n",
        format!("all, last {window} s"),
        total,
        ran.as_secs()
    ));
    print!("{out}");
    let _ = std::io::stdout().flush();
}

fn row(model: &str, w: &WindowStats) -> String {
    let ms = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{:.0}ms", s * 1000.0));
    let tps = w
        .decode_tps
        .quantile(0.5)
        .map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
    format!(
        "{:<16} {:>8} {:>8.2} {:>11} {:>11} {:>11} {:>10} {:>8}\n",
        model,
        w.requests,
        w.rate(),
        ms(w.ttft.quantile(0.5)),
        ms(w.ttft.quantile(0.95)),
        tps,
        ms(w.max_stall),
        w.errors
    )
}
