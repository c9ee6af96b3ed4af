//! The `tokentap` binary: flags in, a running proxy until SIGTERM/SIGINT
//! out; SIGHUP (or a changed config file with `--watch-config`) reloads.

use std::process::ExitCode;

use clap::Parser as _;
use tokentap::config::{self, Cli, Command};
use tokentap::reload::{self, FileWatch, Hangup};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command() {
        Command::Simulate(args) => return block_on(tokentap::simulate::run(args)),
        Command::Demo(args) => {
            let listen = cli.listen.unwrap_or(([127, 0, 0, 1], 8080).into());
            let admin = match cli.admin_listen.as_deref() {
                Some(a) if a.eq_ignore_ascii_case(config::ADMIN_OFF) => None,
                Some(a) => a.parse().ok(),
                None => Some(config::DEFAULT_ADMIN_LISTEN),
            };
            let _logs = tokentap::telemetry::init_logging(config::LogFormat::Text);
            return block_on(tokentap::demo::run(args, listen, admin));
        }
        Command::Run => {}
    }
    // Before loading, so an edit made while starting is not missed.
    let watch = config::file(&cli).map(FileWatch::new);
    let config = match config::load(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tokentap: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let _logs = tokentap::telemetry::init_logging(config.telemetry.log_format);
    block_on(run(cli, config, watch))
}

/// Workers of the control-plane runtime.
const CONTROL_WORKERS: usize = 2;

/// Run `fut` on a multi-threaded runtime; its result becomes the exit code.
/// It runs the control plane (acceptor, admin listener, reloads, live
/// statistics): requests are served on the serving threads
/// (`server.threads`), so two workers are enough however many CPUs there are.
fn block_on(fut: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(CONTROL_WORKERS)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokentap: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokentap: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli, config: config::Config, watch: Option<FileWatch>) -> anyhow::Result<()> {
    // From here on SIGHUP means reload, not the default "terminate".
    let hangup = Hangup::new();
    let routes: Vec<String> = config
        .routes
        .iter()
        .map(|r| format!("{} {} -> {}", r.name, r.prefix, r.upstream))
        .collect();
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let running = tokentap::app::start(config).await?;
    tracing::info!(routes = ?routes, scheme, "listening on {}", running.addr);
    eprintln!("tokentap listening on {} ({scheme})", running.addr);
    // After the proxy's line: harnesses take the first `listening on` as the proxy.
    if let Some(admin) = running.admin_addr {
        tracing::info!("admin listening on {admin}");
        eprintln!("tokentap admin listening on {admin} (/metrics, /healthz, /readyz, /config)");
    }
    tokio::select! {
        () = shutdown_signal() => {}
        () = reload::run(&running, &cli, hangup, watch) => {}
    }
    tracing::info!("shutdown signal received; draining");
    running.shutdown().await;
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
