//! The `tokentap` binary: flags in, a running proxy until SIGTERM/SIGINT
//! out; SIGHUP (or a changed config file with `--watch-config`) reloads.

use std::process::ExitCode;

use clap::Parser as _;
use tokentap::cli::{Cli, Command, PriceArgs};
use tokentap::config::{self, Overrides};
use tokentap::reload::{self, FileWatch, Hangup};

/// Exit code when tokentap cannot start: a configuration error, a file it
/// refers to, or an address it cannot bind.
const START_FAILED: u8 = 2;

fn main() -> ExitCode {
    let flags = match Cli::parse().into_command() {
        Command::Simulate(args) => return block_on(tokentap::simulate::run(args), 1),
        Command::Demo(demo) => {
            let _logs = tokentap::ship::init_logging(config::LogFormat::Text);
            let admin = demo.admin();
            return block_on(tokentap::demo::run(demo.args, demo.listen, admin), 1);
        }
        Command::Check(args) => return check(&args.overrides()),
        Command::Price(args) => return price(&args),
        Command::Bench(bench) => return block_on(tokentap::bench::run(bench), 1),
        Command::Compare(args) => return block_on(tokentap::fleet::run(args), 1),
        Command::Run(args) => args.overrides(),
    };
    // Before loading, so an edit made while starting is not missed.
    let watch = config::file(&flags).map(FileWatch::new);
    let config = match config::load(&flags) {
        Ok(c) => c,
        Err(e) => {
            // `--log-format json` gets its error as JSON too; text stays a
            // plain line.
            let _logs = match early_log_format(&flags) {
                config::LogFormat::Json => tokentap::ship::init_logging(config::LogFormat::Json),
                config::LogFormat::Text => None,
            };
            tokentap::ship::fatal(&format!("configuration error: {e}"));
            return ExitCode::from(START_FAILED);
        }
    };
    let _logs = tokentap::ship::init_logging(config.telemetry.log_format);
    // `run` fails only while starting (binding, CA files, exporters).
    block_on(run(flags, config, watch), START_FAILED)
}

/// The log format before (or without) a loaded configuration: the flag,
/// else `TOKENTAP_TELEMETRY__LOG_FORMAT`, else text.
fn early_log_format(flags: &Overrides) -> config::LogFormat {
    let env = std::env::var("TOKENTAP_TELEMETRY__LOG_FORMAT").unwrap_or_default();
    match flags.log_format {
        Some(f) => f,
        None if env.trim().eq_ignore_ascii_case("json") => config::LogFormat::Json,
        None => config::LogFormat::Text,
    }
}

/// `tokentap check`: the configuration as start-up loads it (layers, env,
/// flags, and the files it refers to), printed redacted on stdout; errors
/// on stderr and exit code 2.
fn check(flags: &Overrides) -> ExitCode {
    // Text stays plain `eprintln!`; JSON goes through the subscriber.
    let _logs = match early_log_format(flags) {
        config::LogFormat::Json => tokentap::ship::init_logging(config::LogFormat::Json),
        config::LogFormat::Text => None,
    };
    // The upstream client is built as start-up builds it, which needs a runtime.
    let Some(runtime) = runtime(&mut tokio::runtime::Builder::new_current_thread()) else {
        return ExitCode::FAILURE;
    };
    let checked = config::load(flags)
        .map_err(|e| format!("configuration error: {e}"))
        .and_then(
            |c| match runtime.block_on(async { tokentap::app::check(&c) }) {
                Ok(()) => Ok(c),
                Err(e) => Err(format!("{e:#}")),
            },
        );
    match checked {
        Ok(c) => {
            print!("{}", c.redacted_toml());
            // As `run` warns (reload::run), so `check` passes nothing silently.
            if c.watch_config && config::file(flags).is_none() {
                let warning = "watch_config is on but there is no config file to watch";
                if tracing::dispatcher::has_been_set() {
                    tracing::warn!(target: tokentap::ship::STARTUP_TARGET, "{warning}");
                } else {
                    eprintln!("tokentap: warning: {warning}");
                }
            }
            if tracing::dispatcher::has_been_set() {
                tracing::info!(target: tokentap::ship::STARTUP_TARGET, "tokentap: configuration OK");
            } else {
                eprintln!("tokentap: configuration OK");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            tokentap::ship::fatal(&e);
            ExitCode::from(START_FAILED)
        }
    }
}

/// `tokentap price`: the price a model gets and why, on stdout; a bad
/// argument or override on stderr with exit code 2.
fn price(args: &PriceArgs) -> ExitCode {
    let query = tokentap::app::PriceQuery {
        provider: &args.provider,
        model: &args.model,
        at: args.at.as_deref(),
        service_tier: args.service_tier.as_deref(),
        route: args.route.as_deref(),
        config: args.config.as_deref(),
        prices: args.prices.as_deref(),
    };
    match tokentap::app::price_report(&query) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tokentap price: {e}");
            ExitCode::from(START_FAILED)
        }
    }
}

/// Workers of the control-plane runtime.
const CONTROL_WORKERS: usize = 2;

/// The runtime `builder` makes, with I/O and timers; `None` after saying
/// on stderr why there is none.
fn runtime(builder: &mut tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    match builder.enable_all().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("tokentap: cannot start the async runtime: {e}");
            None
        }
    }
}

/// Run `fut` on a multi-threaded runtime; its result becomes the exit code
/// (`failure` when it fails).
/// It runs the control plane (acceptor, admin listener, reloads, live
/// statistics): requests are served on the serving threads
/// (`server.threads`), so two workers are enough however many CPUs there are.
fn block_on(fut: impl Future<Output = anyhow::Result<()>>, failure: u8) -> ExitCode {
    let Some(runtime) =
        runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(CONTROL_WORKERS))
    else {
        return ExitCode::FAILURE;
    };
    match runtime.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tokentap::ship::fatal(&format!("{e:#}"));
            ExitCode::from(failure)
        }
    }
}

async fn run(
    flags: Overrides,
    config: config::Config,
    watch: Option<FileWatch>,
) -> anyhow::Result<()> {
    // From here on SIGHUP means reload, not the default "terminate".
    let hangup = Hangup::new();
    let routes: Vec<String> = config
        .routes
        .iter()
        .map(|r| format!("{} {} -> {}", r.name, r.prefix, r.upstream_shown()))
        .collect();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let running = tokentap::app::start(config).await?;
    // As JSON text: the JSON log writes it as an array (`LIST_FIELDS`).
    let routes = serde_json::to_string(&routes).unwrap_or_default();
    tracing::info!(
        target: tokentap::ship::STARTUP_TARGET,
        routes = %routes,
        scheme,
        "tokentap listening on {}",
        running.addr
    );
    // After the proxy's line: harnesses take the first `listening on` as the proxy.
    if let Some(admin) = running.admin_addr {
        tracing::info!(
            target: tokentap::ship::STARTUP_TARGET,
            "tokentap admin listening on {admin} (dashboard http://{admin}/, \
             /metrics, /healthz, /readyz, /config)"
        );
    }
    tokio::select! {
        () = shutdown_signal() => {}
        () = reload::run(&running, &flags, hangup, watch) => {}
    }
    tracing::info!(
        "shutdown signal received; draining (a second SIGTERM or SIGINT cuts what is left at once)"
    );
    running
        .shutdown_or_cut(async {
            shutdown_signal().await;
            tracing::warn!("second shutdown signal: cutting what is left of the drain");
        })
        .await;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
