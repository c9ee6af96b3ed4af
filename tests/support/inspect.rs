//! Reading a running binary from outside: its admin address, a parsed
//! Prometheus `/metrics` scrape, and its resident memory from `/proc`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use super::client::{self, HttpClient, Req};
use super::proxy::{Bin, listening_addr};

/// The `admin listening on ADDR` address the binary printed (waits for it).
pub(crate) async fn admin_addr(bin: &Bin) -> SocketAddr {
    let find = async {
        loop {
            let out = bin.output();
            let found = out
                .lines()
                .filter(|l| l.contains("admin listening on"))
                .find_map(listening_addr);
            if let Some(addr) = found {
                return addr;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    super::within(super::STEP_TIMEOUT, "`admin listening on ADDR`", find).await
}

/// One sample line of a Prometheus text scrape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sample {
    /// Name as written (with `_total`, `_bucket`, … suffixes).
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed Prometheus text scrape.
#[derive(Debug, Clone)]
pub(crate) struct Scrape {
    pub text: String,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// Parse the text format (comments skipped).
    pub(crate) fn parse(text: &str) -> Scrape {
        let samples = text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| parse_line(l).unwrap_or_else(|| panic!("unparseable /metrics line: {l:?}")))
            .collect();
        Scrape {
            text: text.to_owned(),
            samples,
        }
    }

    /// Samples named exactly `name`.
    pub(crate) fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    /// Value of `name` with label `key` = `value` (summed over other labels).
    pub(crate) fn value(&self, name: &str, key: &str, value: &str) -> Option<f64> {
        let hits: Vec<f64> = self
            .named(name)
            .filter(|s| s.labels.get(key).map(String::as_str) == Some(value))
            .map(|s| s.value)
            .collect();
        (!hits.is_empty()).then(|| hits.iter().sum())
    }

    /// Distinct label sets (without `le`) per metric family: a histogram's
    /// `_bucket`, `_sum` and `_count` lines and a counter's `_total` line all
    /// count under the family name. `target_info` is left out.
    pub(crate) fn series_per_family(&self) -> BTreeMap<String, BTreeSet<Vec<(String, String)>>> {
        let mut out: BTreeMap<String, BTreeSet<Vec<(String, String)>>> = BTreeMap::new();
        for s in &self.samples {
            if s.name == "target_info" {
                continue;
            }
            let family = ["_bucket", "_sum", "_count", "_total"]
                .iter()
                .find_map(|suffix| s.name.strip_suffix(suffix))
                .unwrap_or(&s.name);
            let labels = s
                .labels
                .iter()
                .filter(|(k, _)| *k != "le")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            out.entry(family.to_owned()).or_default().insert(labels);
        }
        out
    }

    /// Distinct values of label `key` across the samples of `family`.
    pub(crate) fn label_values(&self, family: &str, key: &str) -> BTreeSet<String> {
        self.series_per_family()
            .get(family)
            .map(|sets| {
                sets.iter()
                    .flat_map(|set| set.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, rest) = match line.find('{') {
        Some(_) => {
            let close = line.rfind('}')?;
            (&line[..close + 1], &line[close + 1..])
        }
        None => line.split_at(line.find(' ')?),
    };
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.find('{') {
        Some(open) => (
            &series[..open],
            parse_labels(&series[open + 1..series.len() - 1])?,
        ),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_owned(),
        labels,
        value,
    })
}

/// `k="v",k2="v2"` with `\"`, `\\` and `\n` escapes in values.
fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek() == Some(&',') || chars.peek() == Some(&' ') {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                c => value.push(c),
            }
        }
        out.insert(key.trim().to_owned(), value);
    }
}

/// `GET /metrics` on the admin listener, parsed.
pub(crate) async fn scrape(c: &HttpClient, admin: SocketAddr) -> Scrape {
    let mut req = Req::post_json(admin, "/metrics", Vec::new());
    req.method = http::Method::GET;
    req.headers.clear();
    let got = client::fetch(c, &req).await;
    assert_eq!(got.status, 200, "admin /metrics: {}", got.text());
    Scrape::parse(&got.text())
}

/// `GET /api/live` on the admin listener, as JSON.
pub(crate) async fn live(c: &HttpClient, admin: SocketAddr) -> serde_json::Value {
    let mut req = Req::post_json(admin, "/api/live", Vec::new());
    req.method = http::Method::GET;
    req.headers.clear();
    let got = client::fetch(c, &req).await;
    assert_eq!(got.status, 200, "admin /api/live: {}", got.text());
    got.json()
}

/// Resident set size of process `pid` in KiB (`VmRSS` in `/proc/PID/status`).
pub(crate) fn rss_kib(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS line in {path}"))
}
