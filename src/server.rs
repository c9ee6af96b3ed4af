//! The listener: TCP connections in, HTTP/1.1 or h2c requests handed to a
//! service out. Bounds header size, header count, header read time and
//! connection count; refuses ambiguous request framing before the service
//! sees it (`head_check`); on shutdown stops accepting and lets in-flight
//! requests finish until the grace period ends.

mod head_check;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, Version, header};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::service::{Service, service_fn};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::config::ServerConfig;
use crate::meter::body::BoxError;
use head_check::{Limits, Refusal, Screened, Tracker, Verdicts};

/// What the service answers: the handler's body, or a refusal of our own.
type Served<B> = Response<Either<B, Full<Bytes>>>;

/// hyper refuses read buffers below this.
const MIN_BUF: usize = 8192;

/// Accept connections on `listener` and serve each request with `handle`
/// until `shutdown` turns true; then drain for at most `cfg.shutdown_grace`.
pub async fn serve<H, F, B>(
    listener: TcpListener,
    cfg: ServerConfig,
    handle: H,
    mut shutdown: watch::Receiver<bool>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.header_read_timeout)
        .max_buf_size(cfg.max_header_bytes.max(MIN_BUF))
        .max_headers(cfg.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(cfg.max_header_bytes).unwrap_or(u32::MAX));
    let builder = Arc::new(builder);
    let limits = Limits {
        max_head_bytes: cfg.max_header_bytes,
        max_headers: cfg.max_headers,
    };
    let permits = Arc::new(Semaphore::new(cfg.max_connections));
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();

    loop {
        while conns.try_join_next().is_some() {}
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(conn) => conn,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => break,
        };
        let _ = stream.set_nodelay(true);
        let verdicts = Arc::new(Verdicts::default());
        let stream = Screened::new(stream, Tracker::new(limits, verdicts.clone()));
        let svc = screened(handle.clone(), verdicts, limits, peer);
        let builder = builder.clone();
        let watcher = graceful.watcher();
        conns.spawn(async move {
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    let in_flight = graceful.count();
    tracing::info!(connections = in_flight, grace = ?cfg.shutdown_grace, "draining");
    tokio::select! {
        _ = graceful.shutdown() => tracing::info!("drained"),
        _ = tokio::time::sleep(cfg.shutdown_grace) => {
            tracing::warn!(connections = conns.len(), "shutdown grace expired; closing the rest");
            conns.abort_all();
        }
    }
    while conns.join_next().await.is_some() {}
}

/// `handle` behind `screen`: refused requests are answered here and never
/// reach the handler.
fn screened<H, F, B>(
    handle: H,
    verdicts: Arc<Verdicts>,
    limits: Limits,
    peer: SocketAddr,
) -> impl Service<Request<Incoming>, Response = Served<B>, Error = Infallible, Future: Send + 'static>
+ Clone
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    service_fn(move |req: Request<Incoming>| {
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
        async move {
            Ok(match admitted {
                Ok(fut) => fut.await.map(Either::Left),
                Err(res) => res,
            })
        }
    })
}

/// Whether a request may reach the handler: the HTTP/1 framing verdict for
/// its head, the header count (HTTP/2 has only a byte limit in the
/// protocol), and no CONNECT.
fn screen(req: &Request<Incoming>, verdicts: &Verdicts, limits: Limits) -> Result<(), Refusal> {
    if req.version() < Version::HTTP_2 {
        verdicts.next()?;
    }
    if req.headers().len() > limits.max_headers {
        return Err(Refusal::TooManyHeaders);
    }
    if req.method() == Method::CONNECT {
        return Err(Refusal::Connect);
    }
    Ok(())
}

/// The JSON error for a refused request; HTTP/1 connections are closed after it.
fn refusal<B>(why: Refusal, version: Version) -> Served<B> {
    let mut res: Response<Full<Bytes>> =
        crate::upstream::error_response(why.status(), why.message(), why.code());
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
