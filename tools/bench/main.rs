//! `tokentap-bench`: the end-to-end benchmark. `suite` starts simulated
//! upstreams, tokentap and the reference proxies and drives them; `load`
//! runs one load pattern against one address; `sink` serves a discarding
//! OTLP/HTTP collector; `floor` serves the bare hyper reverse proxy the suite
//! compares tokentap with; `soak` runs tokentap for a long time against an
//! upstream with random faults and checks every byte and every measurement.
//! Results are JSON lines and Markdown reports (see docs/BENCHMARKS.md and
//! docs/RELIABILITY.md).
#![allow(
    clippy::disallowed_methods,
    reason = "the bench driver measures wall time of whole runs itself"
)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;
use tokentap::simulate::{at_least_one_arg, non_negative_arg};

mod cores;
mod floor;
mod h2;
mod hist;
mod load;
mod procs;
mod sink;
mod soak;
mod suite;
mod targets;
mod ws;

#[derive(Debug, clap::Parser)]
#[command(name = "tokentap-bench", about = "End-to-end benchmark for tokentap")]
enum Cli {
    /// Run the whole benchmark and print a Markdown report
    Suite(suite::SuiteArgs),
    /// Drive one address with one load pattern; print one JSON line
    Load(LoadArgs),
    /// Run tokentap for a while against an upstream with random faults and
    /// random client cancels; check bytes, measurements and memory
    Soak(soak::SoakArgs),
    /// Serve a bare reverse proxy on tokentap's stack (hyper HTTP/1 both
    /// sides, pooled upstream connections, no metering) until stopped
    Floor(floor::FloorArgs),
    /// Serve a discarding OTLP/HTTP collector until Ctrl-C
    Sink {
        #[arg(long, default_value = "127.0.0.1:4318")]
        listen: SocketAddr,
    },
    /// Serve the scripted WebSocket upstream of the relay benchmark until
    /// stopped (realtime-style text deltas; binary messages echoed)
    WsUpstream {
        #[arg(long, default_value = "127.0.0.1:8765")]
        listen: SocketAddr,
    },
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// Target address (127.0.0.1:PORT)
    #[arg(long)]
    addr: SocketAddr,
    /// Path prefix before the API path (e.g. /fast)
    #[arg(long, default_value = "")]
    prefix: String,
    #[arg(long, value_enum, default_value = "chat")]
    api: load::Api,
    /// Ask for a streamed answer
    #[arg(long)]
    stream: bool,
    /// Requests in flight at once (≥ 1)
    #[arg(long, default_value_t = 64, value_parser = at_least_one_arg::<usize>)]
    concurrency: usize,
    /// Seconds measured (≥ 0)
    #[arg(long, default_value_t = 10.0, value_parser = non_negative_arg)]
    duration: f64,
    /// Seconds of warm-up before the measured window (≥ 0)
    #[arg(long, default_value_t = 1.0, value_parser = non_negative_arg)]
    warmup: f64,
    #[arg(long)]
    max_tokens: Option<u32>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tokentap-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        tokio::select! {
            r = run(cli) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".to_owned()),
        }
    });
    // Dropping the runtime drops the suite's processes (stopped by PID).
    drop(runtime);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tokentap-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), String> {
    match cli {
        Cli::Suite(args) => suite::run(args).await,
        Cli::Soak(args) => soak::run(args).await,
        Cli::Floor(args) => floor::run(args).await,
        Cli::Load(a) => {
            let spec = load::Spec {
                addr: a.addr,
                path: format!("{}{}", a.prefix, a.api.path()),
                body: a.api.body(a.stream, a.max_tokens),
                stream: a.stream,
                concurrency: a.concurrency,
                warmup: Duration::from_secs_f64(a.warmup),
                duration: Duration::from_secs_f64(a.duration),
                ramp: 256,
                session: false,
            };
            let report = load::run(spec, |_, _| {}).await;
            println!(
                "{}",
                serde_json::to_string(&report).map_err(|e| e.to_string())?
            );
            Ok(())
        }
        Cli::WsUpstream { listen } => ws::serve_upstream(listen).await,
        Cli::Sink { listen } => {
            let (addr, counts) = sink::start(listen).await.map_err(|e| e.to_string())?;
            eprintln!("OTLP sink on http://{addr}");
            let _ = tokio::signal::ctrl_c().await;
            eprintln!(
                "received {} requests, {} bytes",
                counts.requests.load(std::sync::atomic::Ordering::Relaxed),
                counts.bytes.load(std::sync::atomic::Ordering::Relaxed)
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::Cli;

    /// Flags whose help states a range refuse values outside it while
    /// parsing (a negative duration would panic in `Duration::from_secs_f64`).
    #[test]
    fn ranged_flags_refuse_values_outside_their_range() {
        let parse = |args: &[&str]| Cli::try_parse_from(["tokentap-bench"].iter().chain(args));
        let load = ["load", "--addr", "127.0.0.1:1"];
        assert!(parse(&load).is_ok(), "the defaults are in range");
        for bad in [
            "--duration=-1",
            "--warmup=-0.5",
            "--duration=inf",
            "--concurrency=0",
        ] {
            let args = [&load[..], &[bad]].concat();
            let err = parse(&args).expect_err(bad).to_string();
            let flag = bad.split('=').next().unwrap_or(bad);
            assert!(err.contains(flag), "{bad}: the error names {flag}: {err}");
        }
        for bad in [
            ["suite", "--rounds=0"],
            ["suite", "--duration=-2"],
            ["soak", "--concurrency=0"],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?} is refused");
        }
    }
}
