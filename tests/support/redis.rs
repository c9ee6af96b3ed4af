//! A real `redis-server` (the Debian package, installed by
//! `scripts/setup-test-env.sh`) on a free 127.0.0.1 port with its own
//! directory and no persistence, stopped by its own PID.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::proxy::Scratch;

/// A running redis-server.
pub(crate) struct Redis {
    pub addr: SocketAddr,
    child: Option<Child>,
    dir: Scratch,
    /// Extra server arguments (TLS, a password).
    server_args: Vec<String>,
    /// What `redis-cli` needs to reach it (TLS, the password).
    cli_args: Vec<String>,
}

impl Redis {
    /// Start one on a free port.
    pub(crate) async fn start() -> Redis {
        Redis::start_with(Vec::new(), Vec::new()).await
    }

    /// Start one speaking only TLS with `cert`/`key` (PEM files) and
    /// requiring `password`; `ca` is the CA file redis-cli trusts.
    pub(crate) async fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        ca: &std::path::Path,
        password: &str,
    ) -> Redis {
        let path = |p: &std::path::Path| p.display().to_string();
        let server = [
            "--tls-cert-file",
            &path(cert),
            "--tls-key-file",
            &path(key),
            "--tls-ca-cert-file",
            &path(ca),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
        ];
        let cli = [
            "--tls",
            "--cacert",
            &path(ca),
            "--no-auth-warning",
            "-a",
            password,
        ];
        let owned = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect();
        Redis::start_with(owned(&server), owned(&cli)).await
    }

    async fn start_with(server_args: Vec<String>, cli_args: Vec<String>) -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut r = Redis {
            addr,
            child: None,
            dir: Scratch::new("redis"),
            server_args,
            cli_args,
        };
        r.restart().await;
        r
    }

    /// `redis://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Start it again on the same port (after `stop`), empty.
    pub(crate) async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let tls = !self.cli_args.is_empty();
        let (plain, tls_port) = match tls {
            true => ("0".to_owned(), self.addr.port().to_string()),
            false => (self.addr.port().to_string(), "0".to_owned()),
        };
        let child = super::spawn_server(
            Command::new("redis-server")
                .args(["--bind", "127.0.0.1", "--port"])
                .arg(plain)
                .arg("--tls-port")
                .arg(tls_port)
                .args(&self.server_args)
                .args(["--save", "", "--appendonly", "no", "--dir"])
                .arg(&self.dir.0),
            "redis-server",
        );
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + super::STEP_TIMEOUT;
        while self.ping().await != Some(true) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "redis-server on {} never answered PING",
                self.addr
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop it (SIGKILL by its own PID) and wait for it to exit.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(super::STEP_TIMEOUT, child.wait()).await;
        }
    }

    /// Whether it answers PING (None: no connection).
    pub(crate) async fn ping(&self) -> Option<bool> {
        let reply = self.command(&["PING"]).await?;
        Some(reply.trim() == "PONG")
    }

    /// Run one command through `redis-cli` (from redis-tools, which the
    /// redis-server package pulls in); its output, or `None` when it
    /// could not connect.
    pub(crate) async fn command(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p"])
            .arg(self.addr.port().to_string())
            .args(&self.cli_args)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(5), out)
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
    }
}
