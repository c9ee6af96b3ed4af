//! The soak's load client: a target, the run seed and a concurrency in;
//! one request at a time per keep-alive connection until told to stop, each
//! the scripted exchange for the next request number, and per request a
//! record of what the client saw (every body byte compared with what the
//! upstream sent) out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, header};
use http_body_util::{BodyExt, Full};

use super::script::{Client, End, Exchange, Kind, exchange};
use super::upstream::SEQ_HEADER;
use crate::load::{self, Api, Sender};

/// Longest a request may take before the client gives up on it.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

/// What the client saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Seen {
    /// Status and every body byte as the upstream sent them.
    Complete,
    /// The client left as scripted; the bytes before were right.
    Cancelled,
    /// The body broke off where the upstream dropped or stalled; the bytes
    /// before were right.
    Aborted,
    /// tokentap answered a 5xx of its own (the upstream sent no head).
    ProxyError,
    /// A body byte differs from what the upstream sent (or bytes are missing
    /// from a body that ended normally).
    Mismatch,
    /// Something other than the script says (status, early end, …).
    Unexpected,
    /// The request could not be sent (it may not have reached tokentap).
    SendError,
    /// No answer within `REQUEST_TIMEOUT`.
    Timeout,
}

impl Seen {
    pub(super) fn name(self) -> &'static str {
        match self {
            Seen::Complete => "complete",
            Seen::Cancelled => "cancelled",
            Seen::Aborted => "aborted",
            Seen::ProxyError => "proxy_5xx",
            Seen::Mismatch => "MISMATCH",
            Seen::Unexpected => "UNEXPECTED",
            Seen::SendError => "send_error",
            Seen::Timeout => "TIMEOUT",
        }
    }

    /// A result the script allows.
    pub(super) fn ok(self) -> bool {
        matches!(
            self,
            Seen::Complete | Seen::Cancelled | Seen::Aborted | Seen::ProxyError
        )
    }
}

/// One request as the client saw it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Record {
    pub seq: u64,
    pub kind: Kind,
    pub seen: Seen,
}

/// State shared by the connections and the reporter.
#[derive(Default)]
pub(super) struct Shared {
    pub seed: u64,
    /// High half of every trace id, so tokentap's spans map back to requests.
    pub nonce: u64,
    next_seq: AtomicU64,
    pub sent: AtomicU64,
    pub finished: AtomicU64,
    pub mismatches: AtomicU64,
    pub unexpected: AtomicU64,
    pub connect_errors: AtomicU64,
    pub records: Mutex<Vec<Record>>,
    /// The first few problems, in words.
    pub problems: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

impl Shared {
    pub(super) fn new(seed: u64, nonce: u64) -> Arc<Shared> {
        Arc::new(Shared {
            seed,
            nonce,
            ..Shared::default()
        })
    }

    fn problem(&self, text: String) {
        if let Ok(mut p) = self.problems.lock() {
            if p.len() < 20 {
                p.push(text);
            }
        }
    }

    /// Records so far, counted by kind and result.
    pub(super) fn counts(&self) -> BTreeMap<(Kind, Seen), u64> {
        let mut out = BTreeMap::new();
        if let Ok(r) = self.records.lock() {
            for rec in r.iter() {
                *out.entry((rec.kind, rec.seen)).or_insert(0) += 1;
            }
        }
        out
    }
}

/// Drive `concurrency` connections to `addr` until `shared.stop` is set.
pub(super) async fn run(
    addr: SocketAddr,
    prefix: &'static str,
    concurrency: usize,
    shared: Arc<Shared>,
) {
    let mut tasks = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move {
            connection(addr, prefix, &shared).await;
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

async fn connection(addr: SocketAddr, prefix: &str, shared: &Shared) {
    let mut sender: Option<Sender> = None;
    while !shared.stop.load(Ordering::Relaxed) {
        let reused = match sender.take() {
            Some(mut s) => s.ready().await.is_ok().then_some(s),
            None => None,
        };
        let mut s = match reused {
            Some(s) => s,
            None => match load::connect(addr).await {
                Ok(s) => s,
                Err(e) => {
                    shared.connect_errors.fetch_add(1, Ordering::Relaxed);
                    shared.problem(format!("connect: {e}"));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if s.ready().await.is_err() {
            continue;
        }
        let seq = shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let x = exchange(shared.seed, seq);
        let req = request(addr, prefix, shared.nonce, &x);
        shared.sent.fetch_add(1, Ordering::Relaxed);
        let (seen, detail, keep) =
            match tokio::time::timeout(REQUEST_TIMEOUT, one(&mut s, &x, req)).await {
                Ok(r) => r,
                Err(_) => (Seen::Timeout, Some("no answer in time".to_owned()), false),
            };
        if keep {
            sender = Some(s);
        }
        match seen {
            Seen::Mismatch => {
                shared.mismatches.fetch_add(1, Ordering::Relaxed);
            }
            s if !s.ok() => {
                shared.unexpected.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        if let Some(d) = detail {
            shared.problem(format!(
                "request {seq} ({}): {}: {d}",
                x.kind.name(),
                seen.name()
            ));
        }
        if let Ok(mut r) = shared.records.lock() {
            r.push(Record {
                seq,
                kind: x.kind,
                seen,
            });
        }
        shared.finished.fetch_add(1, Ordering::Relaxed);
    }
}

/// The request for exchange `x`: its API's body, its number for the
/// upstream, and a `traceparent` whose trace id is (nonce, number).
fn request(addr: SocketAddr, prefix: &str, nonce: u64, x: &Exchange) -> Request<Full<Bytes>> {
    let mut b = Request::post(format!("{prefix}{}", x.api.path()))
        .header(header::HOST, addr.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .header(SEQ_HEADER, x.seq)
        .header(
            "traceparent",
            format!("00-{nonce:016x}{:016x}-{:016x}-01", x.seq, x.seq | 1 << 63),
        );
    let key = format!("sk-soak-{:02}", x.seq % 8);
    b = match x.api {
        Api::Chat => b.header(header::AUTHORIZATION, format!("Bearer {key}")),
        Api::Messages => b
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01"),
    };
    b.body(Full::new(x.api.body(x.stream, None)))
        .unwrap_or_else(|_| Request::new(Full::new(Bytes::new())))
}

/// Send one request and check what comes back against the script.
/// Returns the result, a detail for anything the script does not allow,
/// and whether the connection may carry the next request.
async fn one(
    sender: &mut Sender,
    x: &Exchange,
    req: Request<Full<Bytes>>,
) -> (Seen, Option<String>, bool) {
    let pending = sender.send_request(req);
    let res = match x.client {
        Client::CancelBeforeHead(after) => match tokio::time::timeout(after, pending).await {
            Err(_) => return (Seen::Cancelled, None, false),
            Ok(r) => r,
        },
        _ => pending.await,
    };
    let res = match res {
        Ok(r) => r,
        Err(e) => return (Seen::SendError, Some(e.to_string()), false),
    };
    let status = res.status().as_u16();
    if let Client::CancelBeforeHead(_) = x.client {
        return (
            Seen::Unexpected,
            Some(format!("head ({status}) came before the client left")),
            false,
        );
    }
    let mut body = res.into_body();
    if x.end == End::NoHead {
        let drained = body.collect().await.is_ok();
        return if (500..600).contains(&status) {
            (Seen::ProxyError, None, drained)
        } else {
            (
                Seen::Unexpected,
                Some(format!("status {status} for an upstream that sent no head")),
                false,
            )
        };
    }
    if status != x.status {
        return (
            Seen::Unexpected,
            Some(format!("status {status}, upstream sent {}", x.status)),
            false,
        );
    }
    let expected = x.body();
    let mut pos = 0usize;
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Err(e) => {
                return if matches!(x.end, End::Abort | End::Stall(_)) {
                    (Seen::Aborted, None, false)
                } else {
                    (
                        Seen::Unexpected,
                        Some(format!(
                            "body broke off at byte {pos} of {}: {e}",
                            expected.len()
                        )),
                        false,
                    )
                };
            }
        };
        let want = expected.get(pos..pos + data.len());
        if want != Some(&data[..]) {
            let at = want.map_or(expected.len().min(pos), |w| {
                pos + w
                    .iter()
                    .zip(data.iter())
                    .take_while(|(a, b)| a == b)
                    .count()
            });
            return (
                Seen::Mismatch,
                Some(format!(
                    "byte {at} of {} differs ({} bytes received so far)",
                    expected.len(),
                    pos + data.len()
                )),
                false,
            );
        }
        pos += data.len();
        if let Client::CancelAfterBytes(n) = x.client {
            if pos >= n {
                return (Seen::Cancelled, None, false);
            }
        }
    }
    if pos != expected.len() {
        return (
            Seen::Mismatch,
            Some(format!(
                "body ended cleanly after {pos} of {} bytes",
                expected.len()
            )),
            false,
        );
    }
    if x.end != End::Eos {
        return (
            Seen::Unexpected,
            Some("body ended cleanly where the upstream dropped the connection".into()),
            false,
        );
    }
    (Seen::Complete, None, true)
}
