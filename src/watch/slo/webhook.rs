//! The webhook: SLO transitions in (through a bounded queue, never waited
//! on); HTTP POSTs of JSON or Slack bodies out, at most one per SLO per
//! `min_interval`, retried with exponential backoff and jitter on network
//! errors, timeouts, 5xx and 429.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Meter};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::eval::{Change, Objective, Transition};
use crate::attrs::*;
use crate::config::proxy::ProxyEnv;
use crate::config::{AlertFormat, AlertsConfig};
use crate::upstream::{Client, ClientTls, Egress};

/// Events waiting for the sender; more are dropped and counted.
const QUEUE: usize = 256;
/// Response bytes read (and discarded) per attempt.
const MAX_RESPONSE: usize = 64 * 1024;
/// Longest wait between attempts, whatever `Retry-After` asks.
const MAX_DELAY: Duration = Duration::from_secs(60);

/// One breach or recovery as the webhook receives it (`format = "json"`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// `breach` or `recovery`.
    pub event: &'static str,
    /// Name of the SLO.
    pub slo: String,
    /// The objective that changed state (`ttft_p95`, ...).
    pub objective: &'static str,
    /// The SLO's route; `null` = every route.
    pub route: Option<String>,
    /// The concrete model; `null` = the SLO names no model (whole selection).
    pub model: Option<String>,
    /// Observed value over the window, in `unit`.
    pub observed: f64,
    /// The objective's limit, in `unit`.
    pub threshold: f64,
    /// `decode_tps_drop` only: p50 over the baseline window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<f64>,
    /// `s`, `tokens/s` or `ratio`.
    pub unit: &'static str,
    /// Window the observed value covers (s).
    pub window_s: f64,
    /// `decode_tps_drop` only: the baseline window (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_window_s: Option<f64>,
    /// RFC 3339, UTC.
    pub at: String,
    #[serde(skip)]
    kind: Objective,
    #[serde(skip)]
    change: Change,
}

impl From<&Transition> for Event {
    fn from(t: &Transition) -> Event {
        Event {
            event: t.change.as_str(),
            slo: t.slo.to_string(),
            objective: t.objective.as_str(),
            route: t.route.as_deref().map(str::to_owned),
            model: t.model.as_deref().map(str::to_owned),
            observed: t.observed,
            threshold: t.threshold,
            baseline: t.baseline,
            unit: t.objective.unit(),
            window_s: t.window.as_secs_f64(),
            baseline_window_s: t.baseline_window.map(|d| d.as_secs_f64()),
            at: humantime::format_rfc3339_millis(t.at).to_string(),
            kind: t.objective,
            change: t.change,
        }
    }
}

impl Event {
    /// The request body in `format`.
    pub fn body(&self, format: AlertFormat) -> Bytes {
        let v = match format {
            AlertFormat::Json => serde_json::to_vec(self),
            AlertFormat::Slack => serde_json::to_vec(&serde_json::json!({ "text": self.text() })),
        };
        // Serializing strings and finite numbers cannot fail; NaN becomes null.
        Bytes::from(v.unwrap_or_default())
    }

    /// One readable line (the Slack message).
    pub fn text(&self) -> String {
        let breach = self.change == Change::Breach;
        let (icon, verb) = if breach {
            (":rotating_light:", "breached")
        } else {
            (":white_check_mark:", "recovered")
        };
        let upper = matches!(
            self.kind,
            Objective::TtftP95 | Objective::MaxStall | Objective::ErrorRatio
        );
        let cmp = match (upper, breach) {
            (true, true) => ">",
            (true, false) => "≤",
            (false, true) => "<",
            (false, false) => "≥",
        };
        let route = self
            .route
            .as_deref()
            .map_or("all routes".into(), |r| format!("route `{r}`"));
        let model = self
            .model
            .as_deref()
            .map_or("all models".into(), |m| format!("model `{m}`"));
        let mut line = format!(
            "{icon} SLO *{}* {verb}: {} {} {cmp} {} over {} ({route}, {model})",
            self.slo,
            self.objective,
            self.value(self.observed),
            self.value(self.threshold),
            secs(self.window_s),
        );
        if let (Some(b), Some(w)) = (self.baseline, self.baseline_window_s) {
            line.push_str(&format!("; baseline {} over {}", self.value(b), secs(w)));
        }
        line
    }

    fn value(&self, v: f64) -> String {
        match self.unit {
            "s" if v < 1.0 => format!("{:.0} ms", v * 1000.0),
            "s" => format!("{v:.2} s"),
            "ratio" => format!("{:.1}%", v * 100.0),
            _ => format!("{v:.1} tok/s"),
        }
    }
}

fn secs(s: f64) -> String {
    let d = Duration::from_millis((s * 1000.0).round() as u64);
    humantime::format_duration(d).to_string().replace(' ', "")
}

/// The request side's handle: hands events to the sender task.
#[derive(Debug, Clone)]
pub struct Notifier {
    tx: mpsc::Sender<Event>,
    results: Counter<u64>,
}

impl Notifier {
    /// Queue `e`; when the queue is full the event is dropped and counted.
    pub fn notify(&self, e: Event) {
        if self.tx.try_send(e).is_err() {
            count(&self.results, RESULT_QUEUE_FULL);
        }
    }
}

fn count(results: &Counter<u64>, result: &'static str) {
    results.add(1, &[KeyValue::new(SLO_WEBHOOK_RESULT, result)]);
}

/// `tokentap.slo.webhook.events`, by result.
pub(super) fn results_counter(meter: &Meter) -> Counter<u64> {
    meter
        .u64_counter(M_SLO_WEBHOOK)
        .with_unit("{event}")
        .with_description(
            "SLO webhook events: sent, failed (after retries), queue_full or superseded (rate limit).",
        )
        .build()
}

/// Start the sender task on `rt`; `None` when the client cannot be built
/// (logged).
pub(super) fn start(
    cfg: &AlertsConfig,
    results: Counter<u64>,
    rt: &tokio::runtime::Handle,
) -> Option<Notifier> {
    let hook = match Webhook::new(cfg) {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(target: "tokentap::slo", error = %e, "SLO webhook disabled");
            return None;
        }
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    rt.spawn(run(hook, rx, cfg.min_interval, results.clone()));
    Some(Notifier { tx, results })
}

/// Exponential backoff with jitter: attempt `n` waits between half and all
/// of `min(cap, base · 2ⁿ)`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Longest wait before the first retry.
    pub base: Duration,
    /// Longest wait before any retry.
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// Jittered wait before retry `retry`, as described on the type.
    pub fn delay(&self, retry: u32) -> Duration {
        let full = self.base.saturating_mul(1 << retry.min(16)).min(self.cap);
        let half = full / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

/// What one attempt says about the next.
#[derive(Debug)]
enum Attempt {
    Delivered,
    /// Worth another try (network, timeout, 5xx, 429), maybe after `after`.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Not worth retrying (other statuses).
    Fail(String),
}

/// POSTs events to the configured URL.
#[derive(Debug, Clone)]
pub struct Webhook {
    client: Client,
    url: http::Uri,
    headers: Vec<(HeaderName, HeaderValue)>,
    format: AlertFormat,
    timeout: Duration,
    max_retries: u32,
    backoff: Backoff,
}

impl Webhook {
    /// A client for `cfg` (tokentap's own upstream client: webpki roots,
    /// HTTP/1.1 or HTTP/2 by ALPN). Must run inside the
    /// tokio runtime.
    pub fn new(cfg: &AlertsConfig) -> Result<Webhook, String> {
        let proxies = ProxyEnv::from_process().map_err(|(var, m)| format!("{var}: {m}"))?;
        let client = Client::internal(
            cfg.timeout,
            Egress::from_env(&proxies),
            &ClientTls::default(),
        )
        .map_err(|e| e.to_string())?;
        Ok(Webhook {
            client,
            url: cfg.webhook_url.clone(),
            headers: cfg.headers.clone(),
            format: cfg.format,
            timeout: cfg.timeout,
            max_retries: cfg.max_retries,
            backoff: Backoff::default(),
        })
    }

    /// The same webhook with another backoff (tests use milliseconds).
    pub fn with_backoff(mut self, backoff: Backoff) -> Webhook {
        self.backoff = backoff;
        self
    }

    /// POST `e`, retrying as configured; the number of attempts on success.
    pub async fn deliver(&self, e: &Event) -> Result<u32, String> {
        let body = e.body(self.format);
        let mut retries = 0;
        loop {
            match self.attempt(body.clone()).await {
                Attempt::Delivered => return Ok(retries + 1),
                Attempt::Fail(why) => return Err(why),
                Attempt::Retry { after, why } => {
                    if retries >= self.max_retries {
                        return Err(format!("{why}; gave up after {} attempts", retries + 1));
                    }
                    let wait = self.backoff.delay(retries).max(after.unwrap_or_default());
                    tokio::time::sleep(wait.min(MAX_DELAY)).await;
                    retries += 1;
                }
            }
        }
    }

    async fn attempt(&self, body: Bytes) -> Attempt {
        let mut req = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::USER_AGENT,
                concat!("tokentap/", env!("CARGO_PKG_VERSION")),
            );
        for (k, v) in &self.headers {
            req = req.header(k, v);
        }
        let req = match req.body(body) {
            Ok(r) => r,
            Err(e) => return Attempt::Fail(format!("cannot build the request: {e}")),
        };
        let exchange = async {
            let res = self.client.send_bytes(req).await?;
            let status = res.status();
            let after = retry_after(res.headers());
            // Read (and drop) the body so the connection can be reused.
            let _ = Limited::new(res.into_body(), MAX_RESPONSE).collect().await;
            Ok::<_, crate::upstream::UpstreamError>((status, after))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => Attempt::Retry {
                after: None,
                why: format!("no response within {:?}", self.timeout),
            },
            Ok(Err(e)) => Attempt::Retry {
                after: None,
                why: format!("request failed: {e}"),
            },
            Ok(Ok((status, _))) if status.is_success() => Attempt::Delivered,
            Ok(Ok((status, after)))
                if status.is_server_error() || status == StatusCode::TOO_MANY_REQUESTS =>
            {
                Attempt::Retry {
                    after,
                    why: format!("answered {status}"),
                }
            }
            Ok(Ok((status, _))) => Attempt::Fail(format!("answered {status}")),
        }
    }

    fn host(&self) -> &str {
        self.url.host().unwrap_or("?")
    }
}

/// `Retry-After` in seconds (the HTTP-date form is ignored).
fn retry_after(h: &http::HeaderMap) -> Option<Duration> {
    let v = h.get(header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// Per-SLO rate limit: at most one send per `min_interval`; while an SLO
/// waits, only its newest event is kept (the one it replaces is counted
/// as superseded), so the last word (usually a recovery) is never lost.
#[derive(Debug)]
pub struct Limiter {
    min_interval: Duration,
    last: HashMap<String, Instant>,
    pending: BTreeMap<String, Event>,
}

/// What the limiter says about an offered event.
#[derive(Debug, PartialEq)]
pub enum Offer {
    /// Send it now.
    Send(Box<Event>),
    /// Held until the SLO's interval has passed.
    Held,
    /// Held, replacing an older held event (which is dropped).
    Superseded,
}

impl Limiter {
    /// A limiter letting one event per SLO through every `min_interval`.
    pub fn new(min_interval: Duration) -> Limiter {
        Limiter {
            min_interval,
            last: HashMap::new(),
            pending: BTreeMap::new(),
        }
    }

    /// An event arrives at `now`.
    pub fn offer(&mut self, e: Event, now: Instant) -> Offer {
        let free = self
            .last
            .get(&e.slo)
            .is_none_or(|t| now >= *t + self.min_interval);
        if free && !self.pending.contains_key(&e.slo) {
            self.last.insert(e.slo.clone(), now);
            return Offer::Send(Box::new(e));
        }
        match self.pending.insert(e.slo.clone(), e) {
            Some(_) => Offer::Superseded,
            None => Offer::Held,
        }
    }

    /// When the next held event may go.
    pub fn next_due(&self) -> Option<Instant> {
        self.pending
            .keys()
            .filter_map(|slo| self.last.get(slo).map(|t| *t + self.min_interval))
            .min()
    }

    /// Held events whose interval has passed by `now`, marked as sent.
    pub fn due(&mut self, now: Instant) -> Vec<Event> {
        let ready: Vec<String> = self
            .pending
            .keys()
            .filter(|slo| {
                self.last
                    .get(*slo)
                    .is_none_or(|t| now >= *t + self.min_interval)
            })
            .cloned()
            .collect();
        ready
            .into_iter()
            .filter_map(|slo| {
                self.last.insert(slo.clone(), now);
                self.pending.remove(&slo)
            })
            .collect()
    }
}

/// The sender task: ends when every `Notifier` is gone (held events are
/// then dropped).
#[allow(
    clippy::disallowed_methods,
    reason = "webhook rate limiting per SLO, not a measurement"
)]
pub(super) async fn run(
    hook: Webhook,
    mut rx: mpsc::Receiver<Event>,
    min_interval: Duration,
    results: Counter<u64>,
) {
    let mut limiter = Limiter::new(min_interval);
    loop {
        let wake = limiter.next_due();
        let ready = tokio::select! {
            msg = rx.recv() => match msg {
                None => break,
                Some(e) => match limiter.offer(e, Instant::now()) {
                    Offer::Send(e) => vec![*e],
                    Offer::Held => Vec::new(),
                    Offer::Superseded => {
                        count(&results, RESULT_SUPERSEDED);
                        Vec::new()
                    }
                },
            },
            () = sleep_until(wake) => limiter.due(Instant::now()),
        };
        for e in ready {
            send(&hook, &e, &results).await;
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn send(hook: &Webhook, e: &Event, results: &Counter<u64>) {
    match hook.deliver(e).await {
        Ok(_) => count(results, RESULT_SENT),
        Err(why) => {
            count(results, RESULT_FAILED);
            // The URL may hold a secret (a Slack webhook's path): host only.
            tracing::warn!(
                target: "tokentap::slo",
                host = hook.host(),
                slo = %e.slo,
                event = e.event,
                error = %why,
                "SLO webhook not delivered"
            );
        }
    }
}
