//! Proxy launchers: a TOML config in, a running tokentap out — either in
//! this process (`tokentap::app::start`) or as the real binary (a child
//! process with captured stderr/stdout, stopped by its own handle).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Builds a tokentap TOML config.
#[derive(Debug, Clone, Default)]
pub(crate) struct Toml {
    top: Vec<String>,
    routes: Vec<String>,
    sections: Vec<(String, Vec<String>)>,
}

/// TOML string literal.
pub(crate) fn q(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

impl Toml {
    /// Listen on 127.0.0.1:0, OTLP export off.
    pub(crate) fn new() -> Toml {
        Toml::default()
            .top("listen", &q("127.0.0.1:0"))
            .set("telemetry", "otlp_enabled", "false")
    }

    /// A top-level key (`value` is TOML).
    pub(crate) fn top(mut self, key: &str, value: &str) -> Toml {
        self.top.retain(|l| !l.starts_with(&format!("{key} =")));
        self.top.push(format!("{key} = {value}"));
        self
    }

    /// `[section] key = value` (`value` is TOML); replaces an earlier value.
    pub(crate) fn set(mut self, section: &str, key: &str, value: &str) -> Toml {
        let line = format!("{key} = {value}");
        let prefix = format!("{key} =");
        if let Some((_, lines)) = self.sections.iter_mut().find(|(s, _)| s == section) {
            lines.retain(|l| !l.starts_with(&prefix));
            lines.push(line);
        } else {
            self.sections.push((section.to_owned(), vec![line]));
        }
        self
    }

    /// A route matched by path prefix.
    pub(crate) fn route(
        mut self,
        name: &str,
        prefix: &str,
        upstream: &str,
        provider: &str,
    ) -> Toml {
        self.routes.push(format!(
            "[[routes]]\nname = {}\nprefix = {}\nupstream = {}\nprovider = {}\n",
            q(name),
            q(prefix),
            q(upstream),
            q(provider)
        ));
        self
    }

    /// A route with extra TOML lines (e.g. `inject_usage = true`).
    pub(crate) fn route_with(
        mut self,
        name: &str,
        prefix: &str,
        upstream: &str,
        provider: &str,
        extra: &str,
    ) -> Toml {
        self = self.route(name, prefix, upstream, provider);
        if let Some(last) = self.routes.last_mut() {
            last.push_str(extra);
            last.push('\n');
        }
        self
    }

    /// A route given as raw TOML (`[[routes]]` and its keys).
    pub(crate) fn raw_route(mut self, text: &str) -> Toml {
        self.routes.push(text.to_owned());
        self
    }

    /// A route matched by path prefix and `Host`.
    pub(crate) fn route_host(
        mut self,
        name: &str,
        prefix: &str,
        host: &str,
        upstream: &str,
        provider: &str,
    ) -> Toml {
        self.routes.push(format!(
            "[[routes]]\nname = {}\nprefix = {}\nhost = {}\nupstream = {}\nprovider = {}\n",
            q(name),
            q(prefix),
            q(host),
            q(upstream),
            q(provider)
        ));
        self
    }

    /// One OpenAI route `/` → `upstream`.
    pub(crate) fn openai(upstream: &str) -> Toml {
        Toml::new().route("openai", "/", upstream, "openai")
    }

    /// One Anthropic route `/` → `upstream`.
    pub(crate) fn anthropic(upstream: &str) -> Toml {
        Toml::new().route("anthropic", "/", upstream, "anthropic")
    }

    /// Export OTLP to `endpoint` over `protocol` (`grpc` | `http/protobuf`),
    /// metrics every 200 ms.
    pub(crate) fn otlp(self, endpoint: &str, protocol: &str) -> Toml {
        self.set("telemetry", "otlp_enabled", "true")
            .set("telemetry", "otlp_endpoint", &q(endpoint))
            .set("telemetry", "otlp_protocol", &q(protocol))
            .set("telemetry", "metrics_export_interval", &q("200ms"))
            .set("telemetry", "service_name", &q("tokentap-test"))
    }

    /// The TOML text.
    pub(crate) fn render(&self) -> String {
        let mut s = String::new();
        for l in &self.top {
            s.push_str(l);
            s.push('\n');
        }
        s.push('\n');
        for (section, lines) in &self.sections {
            s.push_str(&format!("[{section}]\n"));
            for l in lines {
                s.push_str(l);
                s.push('\n');
            }
            s.push('\n');
        }
        for r in &self.routes {
            s.push_str(r);
            s.push('\n');
        }
        s
    }
}

/// Parse `toml` and start tokentap in this process; panics with the
/// config error. The caller shuts the `Running` down.
pub(crate) async fn start_running(toml: &Toml) -> tokentap::app::Running {
    let text = toml.render();
    let config = tokentap::config::from_toml(&text)
        .unwrap_or_else(|e| panic!("test config rejected: {e}\n--- config ---\n{text}"));
    super::within(
        super::STEP_TIMEOUT,
        "tokentap::app::start",
        tokentap::app::start(config),
    )
    .await
    .unwrap_or_else(|e| panic!("tokentap::app::start failed: {e:#}"))
}

/// `start_running` with an admin listener on a free port of 127.0.0.1.
pub(crate) async fn start_with_admin(toml: Toml) -> tokentap::app::Running {
    start_running(&toml.top("admin_listen", &q("127.0.0.1:0"))).await
}

/// tokentap running inside the test process.
pub(crate) struct InProc {
    pub addr: SocketAddr,
    running: Option<tokentap::app::Running>,
}

impl InProc {
    /// Parse `toml` and start the proxy; panics with the config error.
    pub(crate) async fn start(toml: &Toml) -> InProc {
        let running = start_running(toml).await;
        InProc {
            addr: running.addr,
            running: Some(running),
        }
    }

    /// `http://ADDR`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The running instance, until `stop`.
    pub(crate) fn running(&self) -> Option<&tokentap::app::Running> {
        self.running.as_ref()
    }

    /// Graceful shutdown (flushes telemetry), bounded.
    pub(crate) async fn shutdown(mut self) {
        self.stop().await;
    }

    /// Graceful shutdown in place (flushes telemetry); a second call does nothing.
    pub(crate) async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            super::within(Duration::from_secs(20), "Running::shutdown", r.shutdown()).await;
        }
    }
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A scratch directory removed on drop.
pub(crate) struct Scratch(pub PathBuf);

impl Scratch {
    pub(crate) fn new(tag: &str) -> Scratch {
        let n = SEQ.fetch_add(1, Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("tokentap-test-{tag}-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    /// Write `name` with `text`, returning its path.
    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write scratch file");
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Path of the tokentap binary cargo built for these tests.
pub(crate) fn bin_path() -> &'static str {
    env!("CARGO_BIN_EXE_tokentap")
}

/// A command for the tokentap binary with a clean environment: no `OTEL_*`
/// or `TOKENTAP_*` variables, and no egress proxy (`HTTPS_PROXY` …), leak
/// in from the caller.
pub(crate) fn bin_command() -> Command {
    let mut c = Command::new(bin_path());
    for (k, _) in std::env::vars() {
        let proxy_var = k.to_ascii_lowercase().ends_with("_proxy");
        if k.starts_with("OTEL_") || k.starts_with("TOKENTAP_") || k == "RUST_LOG" || proxy_var {
            c.env_remove(k);
        }
    }
    // Export spans every 100 ms instead of the SDK's 5 s so tests wait less.
    c.env("OTEL_BSP_SCHEDULE_DELAY", "100");
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

/// The tokentap binary running as a child process.
pub(crate) struct Bin {
    pub addr: SocketAddr,
    pub child: Child,
    /// Everything the process wrote to stderr and stdout so far.
    pub output: Arc<Mutex<String>>,
    _scratch: Scratch,
}

impl Bin {
    /// Run the binary with `--config` pointing at `toml`, plus `args`, and
    /// wait for its `listening on` line.
    pub(crate) async fn start(toml: &Toml, args: &[&str], env: &[(&str, &str)]) -> Bin {
        let scratch = Scratch::new("bin");
        let path = scratch.write("tokentap.toml", &toml.render());
        let mut cmd = bin_command();
        cmd.arg("--config").arg(&path).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Bin::spawn(cmd, scratch).await
    }

    /// Run the binary with exactly these arguments.
    pub(crate) async fn start_args(args: &[&str], env: &[(&str, &str)]) -> Bin {
        let mut cmd = bin_command();
        cmd.args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Bin::spawn(cmd, Scratch::new("bin")).await
    }

    async fn spawn(mut cmd: Command, scratch: Scratch) -> Bin {
        let mut child = cmd.spawn().expect("spawn tokentap binary");
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let stderr = child.stderr.take().expect("child stderr");
        let stdout = child.stdout.take().expect("child stdout");
        for pipe in [
            Box::new(stderr) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
            Box::new(stdout),
        ] {
            let out = output.clone();
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(pipe).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    out.lock().unwrap().push_str(&line);
                    out.lock().unwrap().push('\n');
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        let wait = async {
            while let Some(line) = rx.recv().await {
                if let Some(addr) = listening_addr(&line) {
                    return Some(addr);
                }
            }
            None
        };
        let addr = match tokio::time::timeout(super::STEP_TIMEOUT, wait).await {
            Ok(Some(a)) => a,
            Ok(None) => {
                let status = child.wait().await.ok();
                panic!(
                    "tokentap exited ({status:?}) before printing `listening on <addr>`; output:\n{}",
                    output.lock().unwrap()
                )
            }
            Err(_) => panic!(
                "tokentap printed no `listening on <addr>` line within {:?}; output:\n{}",
                super::STEP_TIMEOUT,
                output.lock().unwrap()
            ),
        };
        Bin {
            addr,
            child,
            output,
            _scratch: scratch,
        }
    }

    /// The process's output so far.
    pub(crate) fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// `http://ADDR`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Send SIGTERM to this child (by its own pid).
    pub(crate) fn sigterm(&self) {
        let pid = self.child.id().expect("child still running");
        let st = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -TERM {pid} failed");
    }

    /// Wait (bounded) for the process to exit.
    pub(crate) async fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(s) => s.expect("wait for tokentap"),
            Err(_) => panic!(
                "tokentap did not exit within {limit:?}; output:\n{}",
                self.output()
            ),
        }
    }

    /// SIGTERM and wait for exit (flushes telemetry).
    pub(crate) async fn stop(mut self) -> String {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.sigterm();
            let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        }
        // Give the pipe readers a moment to drain.
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.output()
    }
}

/// The address in a `listening on <addr>` line, in any log format.
pub(crate) fn listening_addr(line: &str) -> Option<SocketAddr> {
    let at = line.find("listening on")?;
    let rest = &line[at..];
    let start = rest.find("127.0.0.1:").or_else(|| rest.find("[::1]:"))?;
    let tail = &rest[start..];
    let end = tail
        .char_indices()
        .find(|(i, c)| {
            *i > 0 && !(c.is_ascii_digit() || *c == '.' || *c == ':' || *c == '[' || *c == ']')
        })
        .map(|(i, _)| i)
        .unwrap_or(tail.len());
    tail[..end].parse().ok()
}

/// Run the binary to completion (bounded) and return (exit status, stderr+stdout).
pub(crate) async fn run_bin(
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::ExitStatus, String) {
    let mut cmd = bin_command();
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = match tokio::time::timeout(super::STEP_TIMEOUT, cmd.output()).await {
        Ok(o) => o.expect("run tokentap"),
        Err(_) => panic!(
            "tokentap {args:?} did not exit within {:?}",
            super::STEP_TIMEOUT
        ),
    };
    let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stdout));
    (out.status, text)
}

impl Toml {
    /// Raw TOML appended after the routes (e.g. `[[slo]]` entries or an
    /// `[alerts]` table).
    pub(crate) fn raw(self, text: &str) -> Toml {
        self.raw_route(text)
    }
}

impl Bin {
    /// The config file `Bin::start` wrote (the one `--config` names).
    pub(crate) fn config_path(&self) -> PathBuf {
        self._scratch.0.join("tokentap.toml")
    }

    /// Replace the config file with `toml`, atomically (write, then rename),
    /// as a config-management tool would.
    pub(crate) fn rewrite_config(&self, toml: &Toml) {
        let next = self._scratch.write("tokentap.toml.next", &toml.render());
        std::fs::rename(&next, self.config_path()).expect("replace the config file");
    }

    /// Send `signal` (`HUP`, `TERM`, …) to this child, by its own pid.
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("child still running");
        let st = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -{signal} {pid} failed");
    }

    /// Send SIGHUP (reload the configuration).
    pub(crate) fn sighup(&self) {
        self.signal("HUP");
    }

    /// Wait (bounded by `STEP_TIMEOUT`) until the output holds `needle` at
    /// least `times` times; returns the output.
    pub(crate) async fn wait_output(&self, needle: &str, times: usize) -> String {
        let wait = async {
            loop {
                let out = self.output();
                if out.matches(needle).count() >= times {
                    return out;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        match tokio::time::timeout(super::STEP_TIMEOUT, wait).await {
            Ok(out) => out,
            Err(_) => panic!(
                "tokentap did not print {needle:?} {times} time(s) within {:?}; output:\n{}",
                super::STEP_TIMEOUT,
                self.output()
            ),
        }
    }

    /// The admin listener's address, from its `admin listening on` line.
    pub(crate) async fn admin_addr(&self) -> SocketAddr {
        let out = self.wait_output("admin listening on", 1).await;
        out.lines()
            .filter(|l| l.contains("admin listening on"))
            .find_map(listening_addr)
            .unwrap_or_else(|| panic!("no address in the `admin listening on` line:\n{out}"))
    }
}
