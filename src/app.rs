//! Wiring: a validated `Config` in, a running proxy out. The only module
//! that knows every stage.

use std::net::SocketAddr;

use crate::config::Config;

/// A running tokentap instance.
#[derive(Debug)]
pub struct Running {
    /// The proxy's bound address (useful when configured with port 0).
    pub addr: SocketAddr,
}

impl Running {
    /// Stop accepting, let in-flight requests finish within the configured
    /// grace period, flush telemetry.
    pub async fn shutdown(self) {}
}

/// Bind the listener and start serving.
pub async fn start(_config: Config) -> anyhow::Result<Running> {
    anyhow::bail!("not yet wired")
}
