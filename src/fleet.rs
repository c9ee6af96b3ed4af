//! `tokentap compare --prometheus URL --side ROUTE:MODEL --side ROUTE:MODEL`:
//! two sides in; the PromQL of the compare dashboard
//! (`deploy/grafana/compare.json`: buckets summed across replicas, then the
//! quantile) sent to Prometheus's HTTP API (`/api/v1/query`); out the
//! cells of `/api/compare` (per prompt-size class and load class, each side
//! as the median of its windows with their spread, and the ratio B / A) as
//! a table or JSON. The whole fleet's figures, where `/api/compare` has one
//! replica's.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, header};
use http_body_util::BodyExt as _;
use serde::Serialize;

use crate::upstream::{Client, ClientTls, Egress};

/// `tokentap compare` flags.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct CompareArgs {
    /// Prometheus's base URL (e.g. http://prometheus:9090), scraping tokentap's /metrics
    #[arg(long, value_name = "URL", value_parser = prometheus_arg)]
    pub prometheus: String,
    /// A side as ROUTE:MODEL (the route name and the requested model), given twice: A, then B
    #[arg(long = "side", value_name = "ROUTE:MODEL", value_parser = Side::parse, required = true)]
    pub sides: Vec<Side>,
    /// How far back to look (e.g. 1h, 30m)
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = duration_arg)]
    pub range: humantime::Duration,
    /// The window each figure is taken over; a side's figure is the median of its windows
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = duration_arg)]
    pub window: humantime::Duration,
    /// Requests a side needs in a cell for its figures to count as enough data
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub min_requests: u64,
    /// Windows with requests a side needs in a cell for enough data
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub min_windows: u64,
    /// Print JSON (the shape of /api/compare's cells) instead of the table
    #[arg(long)]
    pub json: bool,
    /// Give up on one Prometheus query after this many seconds
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    pub timeout: u64,
}

/// One side: a route and the model its requests asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Side {
    /// Route name (`tokentap_route`).
    pub route: String,
    /// Requested model (`gen_ai_request_model`).
    pub model: String,
}

impl Side {
    /// `ROUTE:MODEL`; the model may itself hold colons (`llama3:8b`).
    pub fn parse(s: &str) -> Result<Side, String> {
        match s.split_once(':') {
            Some((route, model)) if !route.trim().is_empty() && !model.trim().is_empty() => {
                Ok(Side {
                    route: route.trim().to_owned(),
                    model: model.trim().to_owned(),
                })
            }
            _ => Err(format!(
                "expected ROUTE:MODEL (a route name, a colon, the requested model), got {s:?}"
            )),
        }
    }

    /// The PromQL label matchers that select this side.
    pub fn selector(&self) -> String {
        format!(
            "tokentap_route=\"{}\",gen_ai_request_model=\"{}\"",
            escape(&self.route),
            escape(&self.model)
        )
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.route, self.model)
    }
}

/// A PromQL string literal's content.
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn prometheus_arg(s: &str) -> Result<String, String> {
    let s = s.trim().trim_end_matches('/');
    match s.parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {
            Ok(s.to_owned())
        }
        _ => Err(format!(
            "expected Prometheus's http(s) base URL, e.g. http://prometheus:9090, got {s:?}"
        )),
    }
}

fn duration_arg(s: &str) -> Result<humantime::Duration, String> {
    let d: humantime::Duration = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if Duration::from(d).as_secs() == 0 {
        return Err(format!("{s:?}: at least 1s"));
    }
    Ok(d)
}

/// Prompt-size class label (the TTFT and prefill histograms carry it).
pub const SIZE: &str = "tokentap_prompt_size_class";
/// Load class label: requests in flight to the same route and model at the request's start.
pub const LOAD: &str = "tokentap_load_class";

/// A compared figure and the histogram it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Figure {
    /// Time to first token (ms; the histogram is in seconds).
    Ttft,
    /// Input tokens / TTFT.
    Prefill,
    /// (output tokens − 1) / (last token − first token).
    Decode,
}

impl Figure {
    /// Every figure, in table order.
    pub const ALL: [Figure; 3] = [Figure::Ttft, Figure::Prefill, Figure::Decode];

    /// Its Prometheus histogram family.
    pub fn metric(self) -> &'static str {
        match self {
            Figure::Ttft => "gen_ai_server_time_to_first_token_seconds",
            Figure::Prefill => "tokentap_prefill_tokens_per_second",
            Figure::Decode => "tokentap_decode_tokens_per_second",
        }
    }

    /// Its key in `/api/compare`'s cells.
    pub fn key(self) -> &'static str {
        match self {
            Figure::Ttft => "ttft_ms",
            Figure::Prefill => "prefill_tps",
            Figure::Decode => "decode_tps",
        }
    }

    /// The cell labels its histogram carries: decode tokens/s has no
    /// prompt-size class, so one decode figure serves every prompt size.
    pub fn cell_labels(self) -> &'static [&'static str] {
        match self {
            Figure::Decode => &[LOAD],
            _ => &[SIZE, LOAD],
        }
    }

    fn scale(self) -> f64 {
        match self {
            Figure::Ttft => 1000.0,
            _ => 1.0,
        }
    }
}

/// `histogram_quantile(q, sum by (le, <cell labels>) (rate(<family>_bucket{<side>}[window])))`:
/// the buckets of every replica summed before the quantile is taken, as
/// the compare dashboard's panels do.
pub fn quantile(figure: Figure, side: &Side, q: f64, window: &str) -> String {
    format!(
        "histogram_quantile({q}, sum by (le, {}) (rate({}_bucket{{{}}}[{window}])))",
        figure.cell_labels().join(", "),
        figure.metric(),
        side.selector()
    )
}

/// What is taken across a side's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The median window.
    Median,
    /// The lowest window.
    Min,
    /// The highest window.
    Max,
}

impl Over {
    fn call(self) -> &'static str {
        match self {
            Over::Median => "quantile_over_time(0.5, ",
            Over::Min => "min_over_time(",
            Over::Max => "max_over_time(",
        }
    }
}

/// The p50 of each window over the range, then `over` across those
/// windows; windows without requests (NaN) are left out.
pub fn over_windows(over: Over, figure: Figure, side: &Side, range: &str, window: &str) -> String {
    format!(
        "{}({} >= 0)[{range}:{window}])",
        over.call(),
        quantile(figure, side, 0.5, window)
    )
}

/// Requests per cell over the range.
pub fn requests(side: &Side, range: &str) -> String {
    format!(
        "sum by ({SIZE}, {LOAD}) (increase({}_count{{{}}}[{range}]))",
        Figure::Ttft.metric(),
        side.selector()
    )
}

/// Windows of the range in which a cell had requests.
pub fn windows(side: &Side, range: &str, window: &str) -> String {
    format!(
        "count_over_time((sum by ({SIZE}, {LOAD}) (increase({}_count{{{}}}[{window}])) > 0)[{range}:{window}])",
        Figure::Ttft.metric(),
        side.selector()
    )
}

/// A figure's median over windows and its spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    /// Median of the windows' figures.
    pub median: f64,
    /// Lowest window.
    pub min: f64,
    /// Highest window.
    pub max: f64,
}

/// One side in one cell.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CellSide {
    /// Requests over the range (rounded: `increase` extrapolates).
    pub requests: u64,
    /// Windows with requests.
    pub windows: u64,
    /// Whether both the request and window minimums are met.
    pub enough_data: bool,
    /// TTFT p50 (ms); `None` without a value.
    pub ttft_ms: Option<Spread>,
    /// Prefill p50 ({token}/s).
    pub prefill_tps: Option<Spread>,
    /// Decode p50 ({token}/s), per load class.
    pub decode_tps: Option<Spread>,
}

impl CellSide {
    fn figure_mut(&mut self, f: Figure) -> &mut Option<Spread> {
        match f {
            Figure::Ttft => &mut self.ttft_ms,
            Figure::Prefill => &mut self.prefill_tps,
            Figure::Decode => &mut self.decode_tps,
        }
    }

    fn figure(&self, f: Figure) -> &Option<Spread> {
        match f {
            Figure::Ttft => &self.ttft_ms,
            Figure::Prefill => &self.prefill_tps,
            Figure::Decode => &self.decode_tps,
        }
    }
}

/// One prompt-size × load-class cell, both sides and B / A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// Prompt-size class (`le_1k`, …).
    pub prompt_size: String,
    /// Load class (`1`, `2-8`, `9+`, …).
    pub load_class: String,
    /// A, then B.
    pub sides: [CellSide; 2],
    /// B's median / A's, per figure (`None` unless both sides have a
    /// value and enough data).
    pub ratio: BTreeMap<&'static str, Option<f64>>,
}

/// What `tokentap compare --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Where the figures come from.
    pub prometheus: String,
    /// The range looked at (s).
    pub range_seconds: u64,
    /// One window (s).
    pub window_seconds: u64,
    /// Requests a side needs in a cell.
    pub min_requests: u64,
    /// Windows a side needs in a cell.
    pub min_windows: u64,
    /// A, then B.
    pub sides: [Side; 2],
    /// Every cell either side has requests in.
    pub cells: Vec<Cell>,
}

/// A `tokentap compare` failure, worded for the person who ran it.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// Not exactly two sides.
    #[error("give exactly two sides, --side ROUTE:MODEL --side ROUTE:MODEL (got {0})")]
    Sides(usize),
    /// Prometheus did not answer.
    #[error("cannot reach Prometheus at {url}: {why}")]
    Unreachable {
        /// The base URL.
        url: String,
        /// The transport error or timeout.
        why: String,
    },
    /// Prometheus answered with an error.
    #[error("Prometheus at {url} refused the query ({status}): {why}\n  query: {query}")]
    Refused {
        /// The base URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Prometheus's `error`, or the body.
        why: String,
        /// The PromQL sent.
        query: String,
    },
    /// No requests for a side.
    #[error(
        "no data for side {side} in the last {range} at {url}: is Prometheus scraping tokentap's /metrics, \
         and are the route ({route}) and requested model ({model}) spelled as tokentap_route and gen_ai_request_model show them?"
    )]
    NoData {
        /// The side as given.
        side: String,
        /// `--range`.
        range: String,
        /// The base URL.
        url: String,
        /// The route.
        route: String,
        /// The model.
        model: String,
    },
}

/// Run `tokentap compare`.
pub async fn run(args: CompareArgs) -> anyhow::Result<()> {
    let comparison = compare(&args).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else {
        print!("{}", table(&comparison));
    }
    Ok(())
}

/// Query Prometheus and fold the answers into cells.
pub async fn compare(args: &CompareArgs) -> Result<Comparison, CompareError> {
    let [a, b] = <[Side; 2]>::try_from(args.sides.clone())
        .map_err(|sides| CompareError::Sides(sides.len()))?;
    let client = Client::internal(
        Duration::from_secs(args.timeout.max(1)),
        Egress::default(),
        &ClientTls::default(),
    )
    .map_err(|e| CompareError::Unreachable {
        url: args.prometheus.clone(),
        why: e.to_string(),
    })?;
    let prom = Prometheus {
        client,
        url: args.prometheus.clone(),
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    let range = format!("{}s", Duration::from(args.range).as_secs());
    let window = format!("{}s", Duration::from(args.window).as_secs());
    let mut cells: BTreeMap<(String, String), [CellSide; 2]> = BTreeMap::new();
    for (i, side) in [&a, &b].into_iter().enumerate() {
        let counted = prom.query(&requests(side, &range)).await?;
        if counted.iter().all(|s| s.value < 0.5) {
            return Err(CompareError::NoData {
                side: side.to_string(),
                range: args.range.to_string(),
                url: args.prometheus.clone(),
                route: side.route.clone(),
                model: side.model.clone(),
            });
        }
        for s in counted {
            cells.entry(s.cell()).or_default()[i].requests = s.value.round() as u64;
        }
        for s in prom.query(&windows(side, &range, &window)).await? {
            cells.entry(s.cell()).or_default()[i].windows = s.value.round() as u64;
        }
        for figure in Figure::ALL {
            for over in [Over::Median, Over::Min, Over::Max] {
                let expr = over_windows(over, figure, side, &range, &window);
                for s in prom.query(&expr).await? {
                    let value = s.value * figure.scale();
                    // Decode has no prompt size: its figure fills every cell of its load class.
                    let targets: Vec<(String, String)> = match &s.size {
                        Some(size) => vec![(size.clone(), s.load.clone())],
                        None => cells
                            .keys()
                            .filter(|(_, l)| *l == s.load)
                            .cloned()
                            .collect(),
                    };
                    for key in targets {
                        let slot = cells.entry(key).or_default()[i].figure_mut(figure);
                        // The median comes first and stands in for the spread
                        // until min and max (over the same windows) arrive.
                        match (over, slot.as_mut()) {
                            (Over::Median, _) => {
                                *slot = Some(Spread {
                                    median: value,
                                    min: value,
                                    max: value,
                                })
                            }
                            (Over::Min, Some(sp)) => sp.min = value,
                            (Over::Max, Some(sp)) => sp.max = value,
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    let cells = cells
        .into_iter()
        .map(|((prompt_size, load_class), mut sides)| {
            for s in &mut sides {
                s.enough_data = s.requests >= args.min_requests && s.windows >= args.min_windows;
            }
            let ratio = Figure::ALL
                .into_iter()
                .map(|f| {
                    let enough = sides.iter().all(|s| s.enough_data);
                    let r = match (sides[0].figure(f), sides[1].figure(f)) {
                        (Some(x), Some(y)) if enough && x.median > 0.0 => Some(y.median / x.median),
                        _ => None,
                    };
                    (f.key(), r)
                })
                .collect();
            Cell {
                prompt_size,
                load_class,
                sides,
                ratio,
            }
        })
        .filter(|c| c.sides.iter().any(|s| s.requests > 0))
        .collect();
    Ok(Comparison {
        prometheus: args.prometheus.clone(),
        range_seconds: Duration::from(args.range).as_secs(),
        window_seconds: Duration::from(args.window).as_secs(),
        min_requests: args.min_requests,
        min_windows: args.min_windows,
        sides: [a, b],
        cells,
    })
}

/// The comparison as a terminal table: one row per cell, A and B side by
/// side with their spread, and B / A.
pub fn table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "A: {}\nB: {}\nfrom {}: the last {}s in {}s windows; each figure is the median of the windows' p50 (min-max); \
         * = not enough data (under {} requests or {} windows; no ratio)",
        c.sides[0],
        c.sides[1],
        c.prometheus,
        c.range_seconds,
        c.window_seconds,
        c.min_requests,
        c.min_windows
    );
    let _ = writeln!(
        out,
        "{:<8} {:<5} {:>6} {:>6}  {:>20} {:>20} {:>5}  {:>20} {:>20} {:>5}  {:>20} {:>20} {:>5}",
        "prompts",
        "load",
        "n A",
        "n B",
        "TTFT A ms",
        "TTFT B ms",
        "B/A",
        "prefill A t/s",
        "prefill B t/s",
        "B/A",
        "decode A t/s",
        "decode B t/s",
        "B/A"
    );
    for cell in &c.cells {
        let [a, b] = &cell.sides;
        let n = |s: &CellSide| format!("{}{}", s.requests, if s.enough_data { "" } else { "*" });
        let _ = write!(
            out,
            "{:<8} {:<5} {:>6} {:>6}",
            cell.prompt_size,
            cell.load_class,
            n(a),
            n(b)
        );
        for f in Figure::ALL {
            let ratio = cell.ratio.get(f.key()).copied().flatten();
            let _ = write!(
                out,
                "  {:>20} {:>20} {:>5}",
                spread_text(a.figure(f)),
                spread_text(b.figure(f)),
                ratio.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"))
            );
        }
        out.push('\n');
    }
    out
}

fn spread_text(s: &Option<Spread>) -> String {
    let n = |v: f64| match v {
        v if v >= 100.0 => format!("{v:.0}"),
        v => format!("{v:.1}"),
    };
    s.map_or_else(
        || "-".to_owned(),
        |s| format!("{} ({}-{})", n(s.median), n(s.min), n(s.max)),
    )
}

/// One sample of an instant vector: its cell labels and value.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    size: Option<String>,
    load: String,
    value: f64,
}

impl Sample {
    fn cell(&self) -> (String, String) {
        (self.size.clone().unwrap_or_default(), self.load.clone())
    }
}

/// Prometheus's HTTP API.
struct Prometheus {
    client: Client,
    url: String,
    timeout: Duration,
}

/// Largest query answer read.
const MAX_ANSWER: usize = 16 << 20;

impl Prometheus {
    /// `GET /api/v1/query?query=…`: the instant vector's samples (NaN and
    /// infinite values left out).
    async fn query(&self, expr: &str) -> Result<Vec<Sample>, CompareError> {
        let url = format!(
            "{}/api/v1/query?query={}",
            self.url,
            percent_encoding::utf8_percent_encode(expr, percent_encoding::NON_ALPHANUMERIC)
        );
        let unreachable = |why: String| CompareError::Unreachable {
            url: self.url.clone(),
            why,
        };
        let req = Request::builder()
            .method(Method::GET)
            .uri(&url)
            .header(header::ACCEPT, "application/json")
            .body(Bytes::new())
            .map_err(|e| unreachable(e.to_string()))?;
        let fetch = async {
            let res = self
                .client
                .send_bytes(req)
                .await
                .map_err(|e| unreachable(e.to_string()))?;
            let status = res.status().as_u16();
            let body = http_body_util::Limited::new(res.into_body(), MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| unreachable(e.to_string()))?
                .to_bytes();
            Ok::<_, CompareError>((status, body))
        };
        let (status, body) = tokio::time::timeout(self.timeout, fetch)
            .await
            .map_err(|_| unreachable(format!("no answer within {:?}", self.timeout)))??;
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if status != 200 || v["status"] != "success" {
            let why = v["error"].as_str().map_or_else(
                || String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
                str::to_owned,
            );
            return Err(CompareError::Refused {
                url: self.url.clone(),
                status,
                why,
                query: expr.to_owned(),
            });
        }
        Ok(samples(&v))
    }
}

/// The samples of a `/api/v1/query` vector answer.
fn samples(v: &serde_json::Value) -> Vec<Sample> {
    let Some(result) = v["data"]["result"].as_array() else {
        return Vec::new();
    };
    result
        .iter()
        .filter_map(|r| {
            let value: f64 = r["value"][1].as_str()?.parse().ok()?;
            Some(Sample {
                size: r["metric"][SIZE].as_str().map(str::to_owned),
                load: r["metric"][LOAD].as_str().unwrap_or("").to_owned(),
                value,
            })
            .filter(|s| s.value.is_finite())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side() -> Side {
        Side::parse("chat:llama3:8b").expect("a side")
    }

    #[test]
    fn sides_parse_with_a_clear_error() {
        let s = side();
        assert_eq!((s.route.as_str(), s.model.as_str()), ("chat", "llama3:8b"));
        for bad in ["chat", ":m", "r:", ""] {
            let e = Side::parse(bad).expect_err(bad);
            assert!(e.contains("ROUTE:MODEL"), "{bad}: {e}");
        }
        let quoted = Side::parse("r:a\"b").expect("a side");
        assert_eq!(
            quoted.selector(),
            "tokentap_route=\"r\",gen_ai_request_model=\"a\\\"b\""
        );
    }

    #[test]
    fn queries_sum_buckets_before_the_quantile() {
        let q = quantile(Figure::Ttft, &side(), 0.5, "300s");
        assert_eq!(
            q,
            "histogram_quantile(0.5, sum by (le, tokentap_prompt_size_class, tokentap_load_class) \
             (rate(gen_ai_server_time_to_first_token_seconds_bucket{tokentap_route=\"chat\",gen_ai_request_model=\"llama3:8b\"}[300s])))"
        );
        let d = over_windows(Over::Min, Figure::Decode, &side(), "3600s", "300s");
        assert!(
            d.starts_with("min_over_time((histogram_quantile(0.5, sum by (le, tokentap_load_class) (rate(tokentap_decode_tokens_per_second_bucket{")
                && d.ends_with(" >= 0)[3600s:300s])"),
            "{d}"
        );
    }

    #[test]
    fn answers_become_samples_without_nan() {
        let v = serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {SIZE: "le_1k", LOAD: "1"}, "value": [1.0, "0.25"]},
            {"metric": {LOAD: "2-8"}, "value": [1.0, "NaN"]},
            {"metric": {LOAD: "9+"}, "value": [1.0, "12"]},
        ]}});
        let got = samples(&v);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].cell(), ("le_1k".to_owned(), "1".to_owned()));
        assert_eq!((got[1].size.clone(), got[1].value), (None, 12.0));
    }
}
