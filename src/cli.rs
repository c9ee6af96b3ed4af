//! The command line: argv in, one [`Command`] with its own flags out.
//! Proxy flags become a plain [`config::Overrides`], so `config` never sees
//! clap; each subcommand accepts only the flags it honours.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::TypedValueParser as _;

use crate::bench::BenchCli;
use crate::config::{self, LogFormat, OtlpProtocol};
use crate::demo::DemoArgs;
use crate::fleet::CompareArgs;
use crate::providers::ProviderKind;
use crate::simulate::SimulateArgs;

/// `tokentap [FLAGS]` or `tokentap SUBCOMMAND [ITS FLAGS]`.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "tokentap",
    version,
    args_conflicts_with_subcommands = true,
    about = "Transparent LLM reverse proxy that meters TTFT, tokens/s and token counts and exports OpenTelemetry",
    long_about = "tokentap sits between your application and an LLM provider, forwards every byte \
unchanged, and turns each request into a measurement (time to first token, tokens per second, \
token counts) exported over OTLP.\n\n\
Quick start:\n  tokentap demo      (simulated provider and traffic; no API key needed)\n  \
tokentap bench --simulate   (a benchmark against the simulated provider)\n  \
tokentap --upstream https://api.openai.com\n  \
OPENAI_BASE_URL=http://127.0.0.1:8080/v1 your-app\n\n\
With no subcommand, tokentap runs the proxy (same as `tokentap run`).\n\n\
Configuration layers, later wins: built-in defaults < OTEL_* env < config file < \
TOKENTAP_* env (nested keys joined by `__`, e.g. TOKENTAP_SERVER__MAX_CONNECTIONS=100) < flags. \
See docs/CONFIG.md for every key."
)]
pub struct Cli {
    /// The proxy's flags when no subcommand is given.
    #[command(flatten)]
    pub proxy: ProxyArgs,

    /// The subcommand; `None` runs the proxy.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, clap::Subcommand)]
pub enum Command {
    /// Run the proxy (the default)
    Run(ProxyArgs),
    /// Load and validate the configuration exactly as start-up would, print
    /// the effective (redacted) configuration and exit: 0 valid, 2 invalid
    Check(ProxyArgs),
    /// Run only the simulated provider (OpenAI- and Anthropic-compatible), for tests and benchmarks
    Simulate(SimulateArgs),
    /// Run tokentap in front of the simulated provider with generated traffic and a live table
    Demo(DemoCli),
    /// Print the price a provider's model gets, and why: the table entry,
    /// its dated price and variants, and every override considered
    Price(PriceArgs),
    /// Benchmark models or servers by the rules of a fair comparison,
    /// measured by tokentap's own meter (`bench compare A.json B.json`
    /// puts two runs side by side)
    Bench(BenchCli),
    /// Compare two sides (ROUTE:MODEL) across the fleet from Prometheus:
    /// per prompt size and load class, side by side with the ratio, by the
    /// compare dashboard's PromQL (`compare --prometheus URL --side A --side B`)
    Compare(CompareArgs),
}

/// `tokentap price PROVIDER MODEL`: which price applies, and why.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct PriceArgs {
    /// Provider config name (openai, anthropic, gemini, vertex, bedrock, azure, …)
    pub provider: String,

    /// Model name as requests or responses carry it (e.g. gpt-4o-2024-08-06)
    pub model: String,

    /// Price at this day (YYYY-MM-DD) or instant (RFC 3339, UTC); default now
    #[arg(long, value_name = "DATE")]
    pub at: Option<String>,

    /// Service tier the request runs at (default, flex, priority, batch)
    #[arg(long, value_name = "TIER")]
    pub service_tier: Option<String>,

    /// Apply this route's overrides (from --config)
    #[arg(long, value_name = "NAME")]
    pub route: Option<String>,

    /// Config file whose [[prices]], [[routes.prices]] and prices_file apply
    #[arg(short, long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// A [[prices]] file, as the proxy's --prices
    #[arg(long, value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

impl Cli {
    /// The subcommand, `Run` with the top-level flags when none was given.
    pub fn into_command(self) -> Command {
        self.command.unwrap_or(Command::Run(self.proxy))
    }
}

/// Flags of the proxy (`tokentap`, `tokentap run`, `tokentap check`). Every
/// flag overrides the config file and env.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct ProxyArgs {
    /// TOML config file (see config/tokentap.toml for every key)
    #[arg(short, long, env = "TOKENTAP_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Forward everything to this base URL as one route named `default` on `/`
    /// (e.g. https://api.openai.com); conflicts with [[routes]] in the config
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,

    /// API family of --upstream; detected from the path when omitted
    #[arg(long, value_name = "NAME", requires = "upstream", value_parser = provider_arg())]
    pub provider: Option<String>,

    /// Proxy listen address [config: listen; default: 127.0.0.1:8080]
    #[arg(short, long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Admin listen address for /metrics, /healthz, /readyz, /config and the
    /// dashboard, or `off` [config: admin_listen; default: 127.0.0.1:9464]
    #[arg(long, value_name = "ADDR|off", value_parser = admin_listen_arg)]
    pub admin_listen: Option<String>,

    /// Reload when the config file changes (polled every second); SIGHUP
    /// always reloads [config: watch_config]
    #[arg(long)]
    pub watch_config: bool,

    /// Log line format [config: telemetry.log_format; default: text]
    #[arg(long, value_name = "FORMAT", value_parser = log_format_arg())]
    pub log_format: Option<LogFormat>,

    /// OTLP collector endpoint, e.g. http://localhost:4318 [config: telemetry.otlp_endpoint]
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    /// OTLP transport [config: telemetry.otlp_protocol; default: http/protobuf]
    #[arg(long, value_name = "PROTOCOL", value_parser = otlp_protocol_arg())]
    pub otlp_protocol: Option<OtlpProtocol>,

    /// Serve the proxy over TLS with this PEM certificate chain (needs
    /// --tls-key) [config: tls.cert]
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,

    /// PEM private key for --tls-cert [config: tls.key]
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,

    /// TOML file of [[prices]] overrides, read at start-up and on every
    /// reload (see docs/COST.md) [config: prices_file]
    #[arg(long, value_name = "FILE")]
    pub prices: Option<std::path::PathBuf>,
}

impl ProxyArgs {
    /// The flags as config overrides.
    pub fn overrides(&self) -> config::Overrides {
        config::Overrides {
            config: self.config.clone(),
            upstream: self.upstream.clone(),
            provider: self.provider.clone(),
            listen: self.listen,
            admin_listen: self.admin_listen.clone(),
            watch_config: self.watch_config,
            log_format: self.log_format,
            otlp_endpoint: self.otlp_endpoint.clone(),
            otlp_protocol: self.otlp_protocol,
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            prices: self.prices.clone(),
        }
    }
}

/// `tokentap demo` flags: where its proxy and dashboard listen, and the traffic.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct DemoCli {
    /// Proxy listen address (a free port when taken)
    #[arg(short, long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Dashboard and /metrics listen address, or `off`
    #[arg(long, value_name = "ADDR|off", value_parser = admin_listen_arg, default_value = "127.0.0.1:9464")]
    pub admin_listen: String,

    /// Options of the `demo` subcommand.
    #[command(flatten)]
    pub args: DemoArgs,
}

impl DemoCli {
    /// The dashboard address; `None` = off.
    pub fn admin(&self) -> Option<SocketAddr> {
        if self.admin_listen.eq_ignore_ascii_case(config::ADMIN_OFF) {
            None
        } else {
            self.admin_listen.parse().ok()
        }
    }
}

/// `--admin-listen`: a socket address or `off`, checked before config loading.
fn admin_listen_arg(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case(config::ADMIN_OFF) || s.parse::<SocketAddr>().is_ok() {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "`{s}` is neither IP:PORT (e.g. 127.0.0.1:9464) nor `off`"
        ))
    }
}

/// `--provider`: one of the registered providers' config names (the list
/// `--help` shows comes from the registry, so a new provider is in it).
fn provider_arg() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(ProviderKind::ALL.map(ProviderKind::config_name))
}

fn log_format_arg() -> impl clap::builder::TypedValueParser<Value = LogFormat> {
    clap::builder::PossibleValuesParser::new(["text", "json"]).map(|s| match s.as_str() {
        "json" => LogFormat::Json,
        _ => LogFormat::Text,
    })
}

fn otlp_protocol_arg() -> impl clap::builder::TypedValueParser<Value = OtlpProtocol> {
    clap::builder::PossibleValuesParser::new(["grpc", "http/protobuf"]).map(|s| match s.as_str() {
        "grpc" => OtlpProtocol::Grpc,
        _ => OtlpProtocol::HttpProtobuf,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        let argv = std::iter::once("tokentap").chain(args.iter().copied());
        Cli::try_parse_from(argv).map(Cli::into_command)
    }

    #[test]
    fn no_subcommand_runs_the_proxy_with_the_top_level_flags() {
        let Ok(Command::Run(p)) = parse(&["--listen", "127.0.0.1:1", "--log-format", "json"])
        else {
            panic!("expected run");
        };
        assert_eq!(p.listen, Some("127.0.0.1:1".parse().expect("addr")));
        let o = p.overrides();
        assert_eq!(o.log_format, Some(LogFormat::Json));
        assert_eq!(o.listen, p.listen);
    }

    #[test]
    fn provider_help_and_values_come_from_the_registry() {
        use clap::CommandFactory as _;
        let mut cmd = Cli::command();
        let help = cmd
            .find_subcommand_mut("run")
            .expect("run")
            .render_long_help()
            .to_string();
        for kind in ProviderKind::ALL {
            let name = kind.config_name();
            assert!(
                help.contains(name),
                "`run --help` lists provider {name}:\n{help}"
            );
            let Ok(Command::Run(p)) = parse(&["--upstream", "http://x", "--provider", name]) else {
                panic!("--provider {name} is accepted");
            };
            assert_eq!(p.provider.as_deref(), Some(name));
        }
        assert!(
            parse(&["--upstream", "http://x", "--provider", "nosuch"]).is_err(),
            "an unregistered provider is refused while parsing"
        );
    }

    #[test]
    fn flag_values_are_checked_while_parsing() {
        assert!(
            parse(&["--provider", "openai"]).is_err(),
            "--provider needs --upstream"
        );
        assert!(parse(&["--log-format", "xml"]).is_err());
        assert!(parse(&["--otlp-protocol", "http"]).is_err());
        assert!(
            parse(&["--admin-listen", "localhost"]).is_err(),
            "--admin-listen takes IP:PORT or off"
        );
        let Ok(Command::Run(p)) = parse(&["--otlp-protocol", "grpc", "--admin-listen", "OFF"])
        else {
            panic!("expected run");
        };
        assert_eq!(p.otlp_protocol, Some(OtlpProtocol::Grpc));
        assert_eq!(p.admin_listen.as_deref(), Some("OFF"));
    }

    #[test]
    fn subcommands_refuse_flags_they_do_not_honour() {
        for args in [
            &["simulate", "--upstream", "http://x"][..],
            &["simulate", "--admin-listen", "off"],
            &["simulate", "--watch-config"],
            &["simulate", "--otlp-endpoint", "http://x"],
            &["simulate", "--config", "x.toml"],
            &["demo", "--upstream", "http://x"],
            &["demo", "--config", "x.toml"],
            &["--upstream", "http://x", "simulate"],
            &["--listen", "127.0.0.1:1", "demo"],
            &["bench", "--upstream", "http://x"],
            &["bench", "--concurrency", "0"],
            &["bench", "--concurrency", "1", "--rate", "2"],
            &["bench", "--simulate", "compare", "a.json", "b.json"],
            &["bench", "compare", "a.json"],
        ] {
            assert!(parse(args).is_err(), "{args:?} must be refused");
        }
    }

    #[test]
    fn each_subcommand_takes_its_own_flags() {
        let Ok(Command::Simulate(s)) = parse(&["simulate", "--listen", "127.0.0.1:7"]) else {
            panic!("expected simulate");
        };
        assert_eq!(s.listen, "127.0.0.1:7".parse::<SocketAddr>().expect("addr"));
        let Ok(Command::Demo(d)) = parse(&["demo", "--admin-listen", "off", "--duration", "3"])
        else {
            panic!("expected demo");
        };
        assert_eq!((d.admin(), d.args.duration), (None, Some(3)));
        let Ok(Command::Check(c)) = parse(&["check", "--config", "a.toml"]) else {
            panic!("expected check");
        };
        assert_eq!(c.config, Some(PathBuf::from("a.toml")));
        assert!(matches!(parse(&["run"]), Ok(Command::Run(_))));
        let Ok(Command::Bench(b)) = parse(&["bench", "--simulate", "--concurrency", "1,8"]) else {
            panic!("expected bench");
        };
        assert!(b.args.simulate && b.command.is_none());
        assert_eq!(b.args.concurrency, [1, 8]);
        let Ok(Command::Bench(b)) = parse(&["bench", "compare", "a.json", "b.json", "--force"])
        else {
            panic!("expected bench compare");
        };
        let Some(crate::bench::BenchCommand::Compare(c)) = b.command else {
            panic!("expected compare");
        };
        assert_eq!(
            (c.a, c.b, c.force),
            ("a.json".into(), "b.json".into(), true)
        );
        let fleet = [
            "compare",
            "--prometheus",
            "http://prom:9090/",
            "--side",
            "r:m",
        ];
        let Ok(Command::Compare(c)) = parse(
            &[
                &fleet[..],
                &["--side", "r:llama3:8b", "--range", "30m", "--json"],
            ]
            .concat(),
        ) else {
            panic!("expected compare");
        };
        assert_eq!(
            c.prometheus, "http://prom:9090",
            "the trailing slash is dropped"
        );
        assert_eq!(c.sides[1].model, "llama3:8b", "the first colon splits");
        assert_eq!(std::time::Duration::from(c.range).as_secs(), 1800);
        assert!(c.json);
        let schemeless = ["compare", "--prometheus", "prom:9090", "--side", "r:m"];
        for (args, names) in [
            ([&fleet[..], &["--side", "nocolon"]].concat(), "nocolon"),
            ([&fleet[..], &["--range", "0s"]].concat(), "0s"),
            (schemeless.to_vec(), "prom:9090"),
        ] {
            let e = parse(&args).expect_err("refused");
            assert!(e.to_string().contains(names), "{args:?}: {e}");
        }
        assert!(
            parse(&["compare", "--side", "r:m"]).is_err(),
            "--prometheus is required"
        );
    }
}
