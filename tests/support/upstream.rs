//! A scripted upstream: requests in (recorded whole), scripted responses out.
//!
//! Each response is a `Reply`: a status, headers and a list of `Step`s run
//! in order while the body streams. The server records every request and,
//! per response, the bytes it handed to hyper and how the body ended
//! (completed, aborted by the script, or dropped early = cancelled by the peer).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};

/// One step of a scripted response body.
#[derive(Debug, Clone)]
pub(crate) enum Step {
    /// Hand these bytes to hyper as one data frame.
    Send(Bytes),
    /// Wait before the next step.
    Sleep(Duration),
    /// Break the body off with an error: hyper drops the connection
    /// (HTTP/1) or resets the stream (HTTP/2) mid-body.
    Abort,
    /// Never send anything again (until the peer goes away).
    Hang,
}

/// A scripted response.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Wait this long before sending the response head.
    pub head_delay: Duration,
    pub steps: Vec<Step>,
}

impl Reply {
    /// A reply with `status` and no headers or body.
    pub(crate) fn new(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            head_delay: Duration::ZERO,
            steps: Vec::new(),
        }
    }

    /// Add a response header.
    pub(crate) fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Append a step.
    pub(crate) fn step(mut self, step: Step) -> Reply {
        self.steps.push(step);
        self
    }

    /// Append a `Send` step.
    pub(crate) fn send(self, bytes: impl Into<Bytes>) -> Reply {
        self.step(Step::Send(bytes.into()))
    }

    /// Append a `Sleep` step.
    pub(crate) fn sleep(self, d: Duration) -> Reply {
        self.step(Step::Sleep(d))
    }

    /// Delay the response head.
    pub(crate) fn head_delay(mut self, d: Duration) -> Reply {
        self.head_delay = d;
        self
    }

    /// All body bytes the script sends, concatenated (what a client should receive
    /// when the script runs to completion).
    pub(crate) fn body_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for s in &self.steps {
            if let Step::Send(b) = s {
                out.extend_from_slice(b);
            }
        }
        out
    }

    /// Split every `Send` into pieces of at most `piece` bytes with `delay`
    /// between them: a slow trickle that cuts frames at arbitrary offsets.
    pub(crate) fn trickle(mut self, piece: usize, delay: Duration) -> Reply {
        let mut steps = Vec::new();
        for s in self.steps {
            match s {
                Step::Send(b) => {
                    let mut off = 0;
                    while off < b.len() {
                        let end = (off + piece).min(b.len());
                        if off > 0 {
                            steps.push(Step::Sleep(delay));
                        }
                        steps.push(Step::Send(b.slice(off..end)));
                        off = end;
                    }
                }
                other => steps.push(other),
            }
        }
        self.steps = steps;
        self
    }
}

/// How a scripted response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// Every step ran and the body finished.
    Completed,
    /// The script's `Abort` step broke the body off.
    Aborted,
    /// The body was dropped before it finished: the peer (the proxy) went
    /// away or reset the stream.
    Cancelled,
}

/// One request the upstream received and what it answered.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub method: Method,
    /// Path and query as received.
    pub path_and_query: String,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// When the request head arrived.
    pub received_at: Instant,
    sent: Mutex<Vec<u8>>,
    end: watch::Sender<Option<(BodyEnd, Instant)>>,
    /// The TCP connection the request came on.
    conn: Arc<Conn>,
}

/// One accepted TCP connection: when the upstream saw it close.
#[derive(Debug)]
struct Conn {
    closed: watch::Sender<Option<Instant>>,
}

impl Conn {
    fn new() -> Arc<Conn> {
        Arc::new(Conn {
            closed: watch::channel(None).0,
        })
    }
}

impl Exchange {
    /// The bytes handed to hyper for the response body so far.
    pub(crate) fn sent(&self) -> Vec<u8> {
        self.sent.lock().unwrap().clone()
    }

    /// How the response body ended, if it has.
    pub(crate) fn end(&self) -> Option<BodyEnd> {
        self.end.borrow().map(|(e, _)| e)
    }

    /// Wait up to `limit` for the response body to end; `None` if it did not.
    pub(crate) async fn wait_end(&self, limit: Duration) -> Option<(BodyEnd, Instant)> {
        wait_set(&self.end, limit).await
    }

    /// When the upstream saw this request's TCP connection close (the peer
    /// closed it or broke it), if it has.
    pub(crate) fn conn_closed(&self) -> Option<Instant> {
        *self.conn.closed.borrow()
    }

    /// Wait up to `limit` for this request's TCP connection to close; the
    /// time the upstream saw it close, `None` if it stayed open. This is
    /// what a cancelled HTTP/1.1 upstream request looks like from the
    /// provider's side, also before any response head was sent.
    pub(crate) async fn wait_conn_closed(&self, limit: Duration) -> Option<Instant> {
        wait_set(&self.conn.closed, limit).await
    }

    /// A request header as a string, if present and visible ASCII.
    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    /// The request body parsed as JSON (Null when it is not JSON).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Wait up to `limit` for `slot` to be set; `None` if it was not.
async fn wait_set<T: Copy>(slot: &watch::Sender<Option<T>>, limit: Duration) -> Option<T> {
    let mut rx = slot.subscribe();
    let fut = async {
        loop {
            if let Some(v) = *rx.borrow_and_update() {
                return v;
            }
            if rx.changed().await.is_err() {
                // The sender is `slot`, borrowed here: it cannot be gone.
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::time::timeout(limit, fut).await.ok()
}

type Handler = dyn Fn(&Exchange) -> Reply + Send + Sync;

struct Shared {
    handler: Box<Handler>,
    exchanges: Mutex<Vec<Arc<Exchange>>>,
    arrived: Notify,
    connections: std::sync::atomic::AtomicUsize,
}

/// A running scripted upstream on 127.0.0.1.
pub(crate) struct Upstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    _task: super::Background,
}

impl Upstream {
    /// Serve every request with the reply `handler` picks for it.
    pub(crate) async fn start(
        handler: impl Fn(&Exchange) -> Reply + Send + Sync + 'static,
    ) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind scripted upstream");
        let addr = listener.local_addr().expect("upstream local addr");
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            exchanges: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            connections: Default::default(),
        });
        let s = shared.clone();
        let task = super::Background::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                // As real servers do: a small write (one token) goes out
                // at once, not after the previous one's delayed ACK.
                let _ = stream.set_nodelay(true);
                s.connections
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let s = s.clone();
                let conn = Conn::new();
                tokio::spawn(async move {
                    let c = conn.clone();
                    let svc =
                        hyper::service::service_fn(move |req| handle(s.clone(), c.clone(), req));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                    conn.closed.send_replace(Some(Instant::now()));
                });
            }
        });
        Upstream {
            addr,
            shared,
            _task: task,
        }
    }

    /// Serve every request with the same reply.
    pub(crate) async fn fixed(reply: Reply) -> Upstream {
        Upstream::start(move |_| reply.clone()).await
    }

    /// Serve every request a 200 with `body` as `application/json`.
    pub(crate) async fn fixed_json(body: &'static str) -> Upstream {
        let reply = Reply::new(200)
            .header("content-type", "application/json")
            .send(body);
        Upstream::fixed(reply).await
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far.
    pub(crate) fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.shared.exchanges.lock().unwrap().clone()
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.shared
            .connections
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Wait (bounded) until the `n`th request (1-based) has arrived and return it.
    pub(crate) async fn nth(&self, n: usize) -> Arc<Exchange> {
        let fut = async {
            loop {
                let notified = self.shared.arrived.notified();
                if let Some(e) = self.shared.exchanges.lock().unwrap().get(n - 1) {
                    return e.clone();
                }
                notified.await;
            }
        };
        match tokio::time::timeout(super::STEP_TIMEOUT, fut).await {
            Ok(e) => e,
            Err(_) => panic!(
                "scripted upstream: expected request #{n} to arrive within {:?}, saw {}",
                super::STEP_TIMEOUT,
                self.exchanges().len()
            ),
        }
    }

    /// The single request received; panics when there were none or several.
    pub(crate) async fn only(&self) -> Arc<Exchange> {
        let e = self.nth(1).await;
        let n = self.exchanges().len();
        assert_eq!(
            n, 1,
            "scripted upstream: expected exactly one request, got {n}"
        );
        e
    }
}

async fn handle(
    shared: Arc<Shared>,
    conn: Arc<Conn>,
    req: Request<Incoming>,
) -> Result<Response<ScriptBody>, Infallible> {
    let received_at = Instant::now();
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let exchange = Arc::new(Exchange {
        method: parts.method,
        path_and_query: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or_default(),
        version: parts.version,
        headers: parts.headers,
        body,
        received_at,
        sent: Mutex::new(Vec::new()),
        end: watch::channel(None).0,
        conn,
    });
    let reply = (shared.handler)(&exchange);
    shared.exchanges.lock().unwrap().push(exchange.clone());
    shared.arrived.notify_waiters();
    if !reply.head_delay.is_zero() {
        tokio::time::sleep(reply.head_delay).await;
    }
    let mut resp = Response::new(ScriptBody {
        steps: reply.steps.into(),
        sleep: None,
        exchange,
        done: false,
    });
    *resp.status_mut() = StatusCode::from_u16(reply.status).expect("scripted status");
    for (k, v) in reply.headers {
        resp.headers_mut().append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("scripted header name"),
            http::HeaderValue::from_str(&v).expect("scripted header value"),
        );
    }
    Ok(resp)
}

/// The response body that runs a script.
pub(crate) struct ScriptBody {
    steps: VecDeque<Step>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    exchange: Arc<Exchange>,
    done: bool,
}

impl ScriptBody {
    fn finish(&mut self, how: BodyEnd) {
        if !self.done {
            self.done = true;
            self.exchange.end.send_replace(Some((how, Instant::now())));
        }
    }
}

impl Drop for ScriptBody {
    fn drop(&mut self) {
        // hyper may drop a body whose `is_end_stream` is true without polling
        // it again; otherwise a drop before the end means the peer went away.
        let how = if self.steps.is_empty() && self.sleep.is_none() {
            BodyEnd::Completed
        } else {
            BodyEnd::Cancelled
        };
        self.finish(how);
    }
}

/// Error a scripted `Abort` raises.
#[derive(Debug)]
pub(crate) struct ScriptedAbort;

impl std::fmt::Display for ScriptedAbort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("scripted abort")
    }
}

impl std::error::Error for ScriptedAbort {}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = ScriptedAbort;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ScriptedAbort>>> {
        let this = &mut *self;
        loop {
            if let Some(sleep) = &mut this.sleep {
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => this.sleep = None,
                    Poll::Pending => return Poll::Pending,
                }
            }
            match this.steps.pop_front() {
                None => {
                    this.finish(BodyEnd::Completed);
                    return Poll::Ready(None);
                }
                Some(Step::Send(b)) => {
                    this.exchange.sent.lock().unwrap().extend_from_slice(&b);
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Some(Step::Sleep(d)) => {
                    this.sleep = Some(Box::pin(tokio::time::sleep(d)));
                }
                Some(Step::Abort) => {
                    this.finish(BodyEnd::Aborted);
                    return Poll::Ready(Some(Err(ScriptedAbort)));
                }
                Some(Step::Hang) => {
                    this.steps.push_front(Step::Hang);
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.steps.is_empty() && self.sleep.is_none()
    }
}
