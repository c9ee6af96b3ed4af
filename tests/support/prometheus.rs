//! A real `prometheus` (the Debian package, installed by
//! `scripts/setup-test-env.sh`) on a free 127.0.0.1 port, scraping the
//! given `/metrics` targets every second into its own temporary TSDB
//! directory, stopped by its own PID.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::process::{Child, Command};

use super::client::{self, HttpClient, Req};
use super::proxy::Scratch;

/// A running prometheus.
pub(crate) struct Prometheus {
    pub addr: SocketAddr,
    child: Option<Child>,
    client: HttpClient,
    _dir: Scratch,
}

impl Prometheus {
    /// Start one scraping `targets` (host:port, path `/metrics`) at 1 s.
    pub(crate) async fn start(targets: &[SocketAddr]) -> Prometheus {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let dir = Scratch::new("prometheus");
        let list: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = dir.write(
            "prometheus.yml",
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: tokentap\n    metrics_path: /metrics\n    \
                 static_configs:\n      - targets: [{}]\n",
                list.join(", ")
            ),
        );
        let child = super::spawn_server(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.0.join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn"),
            "prometheus",
        );
        let p = Prometheus {
            addr,
            child: Some(child),
            client: client::http1(),
            _dir: dir,
        };
        let deadline = tokio::time::Instant::now() + super::STEP_TIMEOUT * 3;
        // Listening first (the client panics on a refused connection),
        // then ready (503 while the TSDB opens).
        loop {
            if tokio::net::TcpStream::connect(addr).await.is_ok()
                && client::fetch(&p.client, &Req::get(addr, "/-/ready"))
                    .await
                    .status
                    == 200
            {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "prometheus on {addr} never became ready"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        p
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `/api/v1/query?query=expr`: the result vector; panics on an error
    /// answer, naming the query.
    pub(crate) async fn query(&self, expr: &str) -> Vec<serde_json::Value> {
        let path = format!(
            "/api/v1/query?query={}",
            percent_encoding::utf8_percent_encode(expr, percent_encoding::NON_ALPHANUMERIC)
        );
        let got = client::fetch(&self.client, &Req::get(self.addr, &path)).await;
        let v = got.json();
        assert!(
            got.status == 200 && v["status"] == "success",
            "prometheus refused {expr}: {} {}",
            got.status,
            got.text()
        );
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// The sum of a query's sample values (0 when empty).
    pub(crate) async fn sum(&self, expr: &str) -> f64 {
        self.query(expr)
            .await
            .iter()
            .filter_map(|r| r["value"][1].as_str()?.parse::<f64>().ok())
            .sum()
    }

    /// Stop it (SIGKILL by its own PID) and wait for it to exit.
    pub(crate) async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(super::STEP_TIMEOUT, child.wait()).await;
        }
    }
}
