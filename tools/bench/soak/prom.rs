//! tokentap's request counter as Prometheus shows it: the admin address in,
//! `tokentap_requests_total` by outcome and `error.type`, and the dropped
//! telemetry counts out.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};

use crate::load;

/// One scrape's figures.
#[derive(Debug, Default, Clone)]
pub(super) struct Scrape {
    /// (outcome, error.type or "") → count.
    pub requests: BTreeMap<(String, String), u64>,
    pub dropped_spans: u64,
    pub dropped_metrics: u64,
    pub streams_active: i64,
}

impl Scrape {
    pub(super) fn total(&self) -> u64 {
        self.requests.values().sum()
    }
}

/// GET `/metrics` from the admin listener at `addr`.
pub(super) async fn scrape(addr: SocketAddr) -> Result<Scrape, String> {
    let mut sender = load::connect(addr).await?;
    let req = Request::get("/metrics")
        .header(header::HOST, addr.to_string())
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let res = sender
        .send_request(req)
        .await
        .map_err(|e| format!("GET /metrics: {e}"))?;
    if !res.status().is_success() {
        return Err(format!("GET /metrics: status {}", res.status()));
    }
    let body = res
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("GET /metrics body: {e}"))?
        .to_bytes();
    Ok(parse(&String::from_utf8_lossy(&body)))
}

fn parse(text: &str) -> Scrape {
    let mut s = Scrape::default();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let labels = labels.trim_end_matches('}');
        match name {
            "tokentap_requests_total" => {
                let key = (
                    label(labels, "tokentap_outcome").unwrap_or_default(),
                    label(labels, "error_type").unwrap_or_default(),
                );
                *s.requests.entry(key).or_insert(0) += value as u64;
            }
            "tokentap_telemetry_dropped_total" => match label(labels, "signal").as_deref() {
                Some("spans") => s.dropped_spans += value as u64,
                Some("metrics") => s.dropped_metrics += value as u64,
                _ => {}
            },
            "tokentap_streams_active" => s.streams_active += value as i64,
            _ => {}
        }
    }
    s
}

/// The value of label `key` in `a="x",b="y"` (escapes undone).
fn label(labels: &str, key: &str) -> Option<String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let (k, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        if k.trim_start_matches(',') == key {
            return Some(value);
        }
        rest = after.get(end..).unwrap_or("");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_request_counter_by_outcome() {
        let text = "# TYPE tokentap_requests_total counter\n\
            tokentap_requests_total{error_type=\"upstream_aborted\",gen_ai_provider_name=\"openai\",tokentap_outcome=\"upstream_error\",otel_scope_name=\"tokentap\"} 3\n\
            tokentap_requests_total{gen_ai_provider_name=\"anthropic\",tokentap_outcome=\"complete\",x=\"a\\\"b,c\"} 5\n\
            tokentap_requests_total{gen_ai_provider_name=\"openai\",tokentap_outcome=\"complete\"} 2\n\
            tokentap_telemetry_dropped_total{signal=\"spans\"} 4\n";
        let s = parse(text);
        assert_eq!(s.total(), 10, "{s:?}");
        assert_eq!(
            s.requests.get(&("complete".into(), String::new())),
            Some(&7)
        );
        assert_eq!(
            s.requests
                .get(&("upstream_error".into(), "upstream_aborted".into())),
            Some(&3)
        );
        assert_eq!(s.dropped_spans, 4);
    }
}
