//! The listener: TCP connections in (plaintext, or TLS with ALPN when a
//! `tls::Tls` is given), HTTP/1.1, h2c or h2 requests handed to a service out. Bounds header size, header count, header read time and
//! connection count; refuses ambiguous request framing before the service
//! sees it (`head_check`); on shutdown stops accepting and lets in-flight
//! requests finish until the grace period ends.

mod head_check;
pub mod tls;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, Version, header};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::config::ServerConfig;
use crate::error::{BoxError, error_response};
use crate::meter::shutdown::Shutdown;
use head_check::{Limits, Refusal, Tracker, Verdicts};

/// A client connection's socket as hyper serves it (reads screened for
/// request framing); an upgrade hands it back.
pub use head_check::Screened as ClientStream;
use head_check::Screened;
use tls::{ClientIdentity, Tls};

/// What the service answers: the handler's body, or a refusal of our own.
type Served<B> = Response<Either<B, Full<Bytes>>>;

/// hyper refuses read buffers below this.
const MIN_BUF: usize = 8192;

/// Accept connections on `listener` (over TLS when `tls` is set) and serve
/// each request with `handle` on the current runtime until `shutdown` turns
/// true; then drain for at most `cfg.shutdown_grace`.
pub async fn serve<H, F, B>(
    listener: TcpListener,
    cfg: ServerConfig,
    tls: Option<Arc<Tls>>,
    handle: H,
    mut shutdown: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let permits = Arc::new(Semaphore::new(cfg.max_connections));
    let mut conns = Conns::new(&cfg, tls, handle);
    while let Some((stream, peer, permit)) = accept(&listener, &permits, &mut shutdown).await {
        conns.serve(stream, peer, permit);
    }
    drop(listener);
    let grace = cfg.shutdown_grace;
    conns.drain(grace, tokio::time::sleep(grace)).await;
}

/// The next connection, with its permit; `None` once `shutdown` turns true.
async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = tokio::select! {
        p = permits.clone().acquire_owned() => p.ok()?,
        _ = stopped(shutdown) => return None,
    };
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, peer)) => return Some((stream, peer, permit)),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stopped(shutdown) => return None,
        }
    }
}

/// The connections one runtime serves, and how it serves them.
struct Conns<H> {
    h1: Arc<http1::Builder>,
    h2: Arc<http2::Builder<TokioExecutor>>,
    /// How long a new connection may take to show which protocol it speaks
    /// (or to finish its TLS handshake).
    preface_wait: Duration,
    /// TLS for every connection; `None` = plaintext.
    tls: Option<Arc<Tls>>,
    limits: Limits,
    handle: H,
    graceful: GracefulShutdown,
    /// Turns true when the drain starts: a connection that has not yet
    /// shown its protocol is closed then, not waited for.
    draining: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl<H, F, B> Conns<H>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    fn new(cfg: &ServerConfig, tls: Option<Arc<Tls>>, handle: H) -> Conns<H> {
        let mut h1 = http1::Builder::new();
        h1.timer(TokioTimer::new())
            .header_read_timeout(cfg.header_read_timeout)
            .max_buf_size(cfg.max_header_bytes.max(MIN_BUF))
            .max_headers(cfg.max_headers);
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        // SETTINGS_ENABLE_CONNECT_PROTOCOL: clients may open WebSockets
        // over HTTP/2 with extended CONNECT (RFC 8441).
        h2.timer(TokioTimer::new())
            .max_header_list_size(u32::try_from(cfg.max_header_bytes).unwrap_or(u32::MAX))
            .enable_connect_protocol();
        Conns {
            h1: Arc::new(h1),
            h2: Arc::new(h2),
            preface_wait: cfg.header_read_timeout,
            tls,
            limits: Limits {
                max_head_bytes: cfg.max_header_bytes,
                max_headers: cfg.max_headers,
            },
            handle,
            graceful: GracefulShutdown::new(),
            draining: watch::Sender::new(false),
            tasks: JoinSet::new(),
        }
    }

    /// Serve `stream` in a task of its own on the current runtime; `done`
    /// is dropped when the connection ends.
    fn serve(&mut self, stream: TcpStream, peer: SocketAddr, done: impl Send + 'static) {
        while self.tasks.try_join_next().is_some() {}
        let _ = stream.set_nodelay(true);
        if let Some(tls) = self.tls.clone() {
            return self.serve_tls(stream, peer, tls, done);
        }
        let verdicts = Arc::new(Verdicts::default());
        let tracker = Tracker::new(self.limits, verdicts.clone());
        let mut draining = self.draining.subscribe();
        let svc = screened(
            self.handle.clone(),
            verdicts,
            self.limits,
            (peer, None),
            draining.clone(),
        );
        let (h1, h2, wait) = (self.h1.clone(), self.h2.clone(), self.preface_wait);
        let watcher = self.graceful.watcher();
        self.tasks.spawn(async move {
            let told = tokio::select! {
                told = tokio::time::timeout(wait, speaks_h2(&stream)) => told,
                // Draining before the client said anything: close it.
                _ = draining.wait_for(|d| *d) => return,
            };
            let ended = match told {
                Err(_) => Ok(()), // sent nothing telling within the header timeout
                Ok(Err(e)) => Err(e.to_string()),
                Ok(Ok(true)) => watcher
                    .watch(h2.serve_connection(TokioIo::new(stream), svc))
                    .await
                    .map_err(|e| e.to_string()),
                Ok(Ok(false)) => {
                    drop(watcher);
                    serve_h1(&h1, Screened::new(stream, tracker), svc, draining).await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(done);
        });
    }

    /// Serve `stream` over TLS: the handshake must finish within the header
    /// read time (a slow handshake is cut like a slow request head), then
    /// ALPN picks h2 or HTTP/1.1. A client that speaks plaintext HTTP to
    /// this port gets a short plaintext 400 saying so.
    fn serve_tls(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        tls: Arc<Tls>,
        done: impl Send + 'static,
    ) {
        let (h1, h2, wait) = (self.h1.clone(), self.h2.clone(), self.preface_wait);
        let (handle, limits) = (self.handle.clone(), self.limits);
        let watcher = self.graceful.watcher();
        let mut draining = self.draining.subscribe();
        self.tasks.spawn(async move {
            let handshake = async {
                if !starts_tls(&stream).await? {
                    let mut stream = stream;
                    let _ = stream.write_all(PLAINTEXT_TO_TLS).await;
                    let _ = stream.shutdown().await;
                    return Ok(None);
                }
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
                acceptor.accept(stream).await.map(Some)
            };
            let shaken = tokio::select! {
                r = tokio::time::timeout(wait, handshake) => r,
                _ = draining.wait_for(|d| *d) => return,
            };
            let stream = match shaken {
                Err(_) => {
                    tracing::debug!(%peer, listener = tls.listener, "TLS handshake timed out");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(%peer, listener = tls.listener, error = %e, "TLS handshake failed");
                    return;
                }
                Ok(Ok(None)) => {
                    tracing::debug!(%peer, listener = tls.listener, "plaintext sent to the TLS port");
                    return;
                }
                Ok(Ok(Some(s))) => s,
            };
            let session = stream.get_ref().1;
            let speaks_h2 = session.alpn_protocol() == Some(b"h2");
            let identity = session
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(tls::subject_cn);
            let verdicts = Arc::new(Verdicts::default());
            let tracker = Tracker::new(limits, verdicts.clone());
            let svc = screened(handle, verdicts, limits, (peer, identity), draining.clone());
            let ended = if speaks_h2 {
                watcher
                    .watch(h2.serve_connection(TokioIo::new(stream), svc))
                    .await
                    .map_err(|e| e.to_string())
            } else {
                // WebSocket over TLS (`wss`) too, as plaintext HTTP/1 is served.
                drop(watcher);
                serve_h1(&h1, Screened::new(stream, tracker), svc, draining).await
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(done);
        });
    }

    /// Let the connections finish their requests until `cut` resolves (at
    /// the latest when `grace` ends), then close the rest. HTTP/2 clients
    /// get GOAWAY at once, idle HTTP/1 connections close, busy ones close
    /// after their response.
    async fn drain(mut self, grace: Duration, cut: impl Future<Output = ()>) {
        self.draining.send_replace(true);
        // One drain per serving thread: the thread's name tells them apart.
        let current = std::thread::current();
        let thread = current.name().unwrap_or("serving thread");
        // Every connection, HTTP/1.1 and HTTP/2, plaintext or TLS, is a task;
        // `graceful` alone would count only the HTTP/2 ones.
        while self.tasks.try_join_next().is_some() {}
        let open = self.tasks.len();
        if open == 0 {
            tracing::info!(thread, "draining: no connections open; done");
            return;
        }
        tracing::info!(
            thread,
            connections = open,
            grace = %humantime::format_duration(grace),
            "draining: waiting for in-flight requests, at most server.shutdown_grace"
        );
        let (graceful, tasks) = (self.graceful, &mut self.tasks);
        // HTTP/1 connections are not watched by `graceful`: their tasks are
        // waited for too.
        let all_ended = async {
            graceful.shutdown().await;
            while tasks.join_next().await.is_some() {}
        };
        let ended = tokio::select! {
            () = all_ended => true,
            () = cut => false,
        };
        if ended {
            tracing::info!(thread, "drained");
        } else {
            tracing::warn!(
                thread,
                connections = self.tasks.len(),
                "drain cut (shutdown grace expired, or a second signal); closing the rest"
            );
            self.tasks.abort_all();
        }
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Whether the client opens with the HTTP/2 connection preface (h2c with
/// prior knowledge); HTTP/1 otherwise. Peeks, so hyper reads the bytes
/// itself: a prefix read here and replayed to it (what hyper-util's `auto`
/// connection does) makes hyper's first read a short one, and its read
/// buffer then doubles to 16 KiB for the life of every HTTP/1 connection.
async fn speaks_h2(stream: &TcpStream) -> std::io::Result<bool> {
    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
    let mut buf = [0; PREFACE.len()];
    let mut pause = Duration::from_millis(1);
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 || buf[..n] != PREFACE[..n] {
            // End of file included: hyper sees it and ends the connection.
            return Ok(false);
        }
        if n == PREFACE.len() {
            return Ok(true);
        }
        // Part of the preface so far ("P" of a "POST" sent byte by byte,
        // or a split preface): a peek would return at once with the same
        // bytes, so wait for the rest, less and less often (a client that
        // trickles bytes costs at most 20 wake-ups a second).
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// The answer to plaintext HTTP sent to a TLS port.
const PLAINTEXT_TO_TLS: &[u8] = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\
content-type: text/plain; charset=utf-8\r\ncontent-length: 45\r\n\r\n\
this port speaks TLS: use https:// to reach it";

/// Whether the client's first byte opens a TLS handshake record (0x16);
/// peeks, so the TLS acceptor reads it itself.
async fn starts_tls(stream: &TcpStream) -> std::io::Result<bool> {
    let mut first = [0; 1];
    let n = stream.peek(&mut first).await?;
    // End of file: let the handshake see it and fail.
    Ok(n == 0 || first[0] == 0x16)
}

/// A connection handed to a serving thread.
type Handoff = (std::net::TcpStream, SocketAddr, OwnedSemaphorePermit, Open);

/// Serving threads: each runs a single-threaded runtime and serves the
/// connections it is handed to their end, upstream connections and drains
/// included, so nothing a request does wakes another thread (a
/// work-stealing runtime hands tasks and socket wake-ups between its
/// workers; ARCHITECTURE gives the numbers). One acceptor gives each new
/// connection to the thread serving the fewest.
#[derive(Debug)]
pub struct Shards {
    acceptor: Option<tokio::task::JoinHandle<()>>,
    served: Vec<oneshot::Receiver<()>>,
    exit: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// A connection's place in its serving thread's count of open ones.
struct Open(Arc<AtomicUsize>);

impl Open {
    fn new(count: &Arc<AtomicUsize>) -> Open {
        count.fetch_add(1, Ordering::Relaxed);
        Open(count.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Shards {
    /// Start `cfg.threads` serving threads (0: one per CPU) and an acceptor
    /// task for `listener` on the current runtime. The acceptor stops when
    /// `shutdown` turns true; the threads then drain like [`serve`] until
    /// `cut` cuts (the caller keeps the grace period's clock), and keep
    /// running what their requests left behind (drains, shared HTTP/2
    /// connections) until [`Shards::exit`] or the `Shards` is dropped.
    pub fn start<M, H, F, B>(
        listener: TcpListener,
        cfg: &ServerConfig,
        tls: Option<Arc<Tls>>,
        make_handler: M,
        shutdown: watch::Receiver<bool>,
        cut: Arc<Shutdown>,
    ) -> std::io::Result<Shards>
    where
        M: Fn(usize) -> H,
        H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Response<B>> + Send + 'static,
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let n = match cfg.threads {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n => n,
        };
        let (exit, exit_rx) = watch::channel(false);
        let mut shards = Shards {
            acceptor: None,
            served: Vec::with_capacity(n),
            exit,
            threads: Vec::with_capacity(n),
        };
        let mut inboxes = Vec::with_capacity(n);
        for id in 1..=n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (tx, mut rx) = mpsc::unbounded_channel::<Handoff>();
            let (done, served) = oneshot::channel();
            // The thread's id reaches the upstream pool through its handler.
            let (cfg, handle, mut exit) = (cfg.clone(), make_handler(id), exit_rx.clone());
            let (tls, cut) = (tls.clone(), cut.clone());
            let thread = std::thread::Builder::new()
                .name(format!("tokentap-serve-{id}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        let mut conns = Conns::new(&cfg, tls, handle);
                        while let Some((stream, peer, permit, open)) = rx.recv().await {
                            // Registered with this thread's runtime from here on.
                            match TcpStream::from_std(stream) {
                                Ok(stream) => conns.serve(stream, peer, (permit, open)),
                                Err(e) => {
                                    tracing::warn!(%peer, error = %e, "cannot serve connection")
                                }
                            }
                        }
                        let grace = cfg.shutdown_grace;
                        conns
                            .drain(grace, async move {
                                cut.wait_cut().await;
                            })
                            .await;
                        let _ = done.send(());
                        let _ = exit.wait_for(|e| *e).await;
                    });
                })?;
            inboxes.push((tx, Arc::new(AtomicUsize::new(0))));
            shards.served.push(served);
            shards.threads.push(thread);
        }
        let permits = Arc::new(Semaphore::new(cfg.max_connections));
        shards.acceptor = Some(tokio::spawn(async move {
            let mut shutdown = shutdown;
            while let Some((stream, peer, permit)) =
                accept(&listener, &permits, &mut shutdown).await
            {
                let (mut stream, mut permit) = match stream.into_std() {
                    Ok(stream) => (stream, permit),
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "cannot hand over connection");
                        continue;
                    }
                };
                // The thread serving the fewest; one whose runtime is gone
                // (it cannot be, short of a bug) is passed over from then on.
                while let Some(i) =
                    (0..inboxes.len()).min_by_key(|&i| inboxes[i].1.load(Ordering::Relaxed))
                {
                    let (tx, count) = &inboxes[i];
                    match tx.send((stream, peer, permit, Open::new(count))) {
                        Ok(()) => break,
                        Err(mpsc::error::SendError((back, _, held, _))) => {
                            tracing::error!(thread = i, "a serving thread has stopped");
                            (stream, permit) = (back, held);
                            inboxes.swap_remove(i);
                        }
                    }
                }
                if inboxes.is_empty() {
                    tracing::error!("every serving thread has stopped; no longer accepting");
                    return;
                }
            }
            // Dropping the inboxes starts every thread's drain.
        }));
        Ok(shards)
    }

    /// Resolves once the acceptor has stopped and every serving thread's
    /// connections have ended (or the grace period cut them).
    pub async fn served(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.await;
        }
        // One at a time, each dropped once it resolved: a wait cut short
        // (the drain's deadline) is taken up again where it stopped.
        while let Some(rx) = self.served.last_mut() {
            let _ = rx.await;
            self.served.pop();
        }
    }

    /// End the serving threads: what their requests left running is dropped.
    pub async fn exit(mut self) {
        let _ = self.exit.send(true);
        let threads = std::mem::take(&mut self.threads);
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        if let Some(acceptor) = &self.acceptor {
            acceptor.abort();
        }
        let _ = self.exit.send(true);
    }
}

/// Serve HTTP/1 on `stream` with upgrades (WebSocket), which hyper-util's
/// graceful watcher cannot hold: the drain flag asks the connection to
/// finish its request instead.
async fn serve_h1<S, Svc, B>(
    h1: &http1::Builder,
    stream: S,
    svc: Svc,
    mut draining: watch::Receiver<bool>,
) -> Result<(), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    Svc: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
    Svc::Future: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let conn = h1.serve_connection(TokioIo::new(stream), svc);
    let mut conn = std::pin::pin!(conn.with_upgrades());
    let before_drain = tokio::select! {
        ended = conn.as_mut() => Some(ended),
        _ = draining.wait_for(|d| *d) => None,
    };
    let ended = match before_drain {
        Some(ended) => ended,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    ended.map_err(|e| e.to_string())
}

/// `handle` behind `screen`: refused requests are answered here and never
/// reach the handler. Each request carries the client certificate's
/// subject (`ClientIdentity`) when the connection has one. An HTTP/1
/// response whose head goes out once `draining` is true says
/// `Connection: close` (the connection closes after it).
fn screened<H, F, B>(
    handle: H,
    verdicts: Arc<Verdicts>,
    limits: Limits,
    (peer, identity): (SocketAddr, Option<Arc<str>>),
    draining: watch::Receiver<bool>,
) -> impl Service<Request<Incoming>, Response = Served<B>, Error = Infallible, Future: Send + 'static>
+ Clone
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    service_fn(move |mut req: Request<Incoming>| {
        if let Some(id) = &identity {
            req.extensions_mut().insert(ClientIdentity(id.clone()));
        }
        let req_version = req.version();
        let admitted = match screen(&req, &verdicts, limits) {
            // Boxed: hyper keeps an allocation the size of the service
            // future for as long as the client connection lives; the
            // handler's future is several KiB, which every held stream
            // would pay. Boxed, it is freed once the response head is out.
            Ok(()) => Ok(Box::pin(handle(req))),
            Err(why) => {
                tracing::debug!(%peer, reason = why.message(), "request refused");
                Err(refusal(why, req.version()))
            }
        };
        // HTTP/2 needs none: its clients got GOAWAY.
        let draining = (req_version < Version::HTTP_2).then(|| draining.clone());
        async move {
            let mut res = match admitted {
                Ok(fut) => fut.await.map(Either::Left),
                Err(res) => res,
            };
            if draining.is_some_and(|d| *d.borrow()) {
                close_after(&mut res);
            }
            Ok(res)
        }
    })
}

/// Tell an HTTP/1 client the connection closes after this response (the
/// drain disabled keep-alive), unless it switches protocols (a WebSocket's
/// `101` keeps its `Connection: upgrade`).
fn close_after<B>(res: &mut Response<B>) {
    if res.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        res.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
}

/// Whether a request may reach the handler: the HTTP/1 framing verdict for
/// its head, the header count (HTTP/2 has only a byte limit in the
/// protocol), and no CONNECT but an HTTP/2 WebSocket one.
fn screen(req: &Request<Incoming>, verdicts: &Verdicts, limits: Limits) -> Result<(), Refusal> {
    if req.version() < Version::HTTP_2 {
        verdicts.next()?;
    }
    if req.headers().len() > limits.max_headers {
        return Err(Refusal::TooManyHeaders);
    }
    if req.method() == Method::CONNECT && !is_websocket_connect(req) {
        if req.extensions().get::<hyper::ext::Protocol>().is_some() {
            return Err(Refusal::ConnectProtocol);
        }
        return Err(Refusal::Connect);
    }
    Ok(())
}

/// Whether `req` opens a WebSocket over HTTP/2: an extended CONNECT whose
/// `:protocol` is `websocket` (RFC 8441 §4; the token compares without case,
/// like an `Upgrade` token).
pub fn is_websocket_connect<B>(req: &Request<B>) -> bool {
    req.method() == Method::CONNECT
        && req.version() == Version::HTTP_2
        && req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("websocket"))
}

/// The JSON error for a refused request; HTTP/1 connections are closed after it.
fn refusal<B>(why: Refusal, version: Version) -> Served<B> {
    let mut res: Response<Full<Bytes>> = error_response(why.status(), why.message(), why.code());
    if version < Version::HTTP_2 {
        res.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    res.map(Either::Right)
}

/// Resolves once the shutdown flag turns true (or its sender is gone).
async fn stopped(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_response_during_the_drain_says_connection_close_but_an_upgrade_keeps_its_own() {
        let mut ok = Response::new(());
        close_after(&mut ok);
        assert_eq!(ok.headers()[header::CONNECTION], "close");
        let mut upgrade = Response::new(());
        *upgrade.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
        upgrade.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("Upgrade"),
        );
        close_after(&mut upgrade);
        assert_eq!(
            upgrade.headers()[header::CONNECTION],
            "Upgrade",
            "a WebSocket's 101 is left alone"
        );
    }
}
