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
}

impl Redis {
    /// Start one on a free port.
    pub(crate) async fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut r = Redis {
            addr,
            child: None,
            dir: Scratch::new("redis"),
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
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.addr.port().to_string())
            .args(["--save", "", "--appendonly", "no", "--dir"])
            .arg(&self.dir.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run redis-server ({e}): install it with \
                     `apt-get install -y --no-install-recommends redis-server` \
                     (scripts/setup-test-env.sh does)"
                )
            });
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
