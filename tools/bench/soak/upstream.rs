//! The soak's upstream: requests carrying `x-soak-seq` in; the scripted
//! exchange for that request number out, with its faults (late heads,
//! paced and split pieces, dropped connections, stalls, no head at all).
//! Counts what it served so the report can show tokentap forwarded it.

use std::future::Future as _;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::time::Sleep;

use super::script::{End, Exchange, exchange};

/// The request header naming the exchange.
pub(super) const SEQ_HEADER: &str = "x-soak-seq";

/// What the upstream saw.
#[derive(Debug, Default)]
pub(super) struct Served {
    pub requests: AtomicU64,
    /// Requests without a usable `x-soak-seq` (answered 400).
    pub unknown: AtomicU64,
}

/// Serve the exchanges of the run seeded with `seed` on 127.0.0.1.
pub(super) async fn start(seed: u64) -> std::io::Result<(SocketAddr, Arc<Served>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let served = Arc::new(Served::default());
    let s = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let s = s.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| answer(seed, s.clone(), req));
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Ok((addr, served))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn answer(
    seed: u64,
    served: Arc<Served>,
    req: http::Request<Incoming>,
) -> Result<Response<Scripted>, BoxError> {
    served.requests.fetch_add(1, Ordering::Relaxed);
    let seq = req
        .headers()
        .get(SEQ_HEADER)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    // Read the request body first, as a real provider does.
    let _ = req.into_body().collect().await;
    let Some(seq) = seq else {
        served.unknown.fetch_add(1, Ordering::Relaxed);
        let mut res = Response::new(Scripted::empty());
        *res.status_mut() = http::StatusCode::BAD_REQUEST;
        return Ok(res);
    };
    let x = exchange(seed, seq);
    tokio::time::sleep(x.head_delay).await;
    if x.end == End::NoHead {
        // A service error makes hyper close the connection without a response.
        return Err("scripted: no response head".into());
    }
    let mut res = Response::new(Scripted::new(&x));
    *res.status_mut() = http::StatusCode::from_u16(x.status)?;
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(x.content_type),
    );
    if x.stream {
        res.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-cache"),
        );
    }
    Ok(res)
}

/// A scripted body: pieces after their delays, then the scripted end.
pub(super) struct Scripted {
    pieces: std::vec::IntoIter<(Duration, Bytes)>,
    next: Option<Bytes>,
    end: End,
    /// The `Content-Length` to send, if any.
    length: Option<u64>,
    sleep: Option<Pin<Box<Sleep>>>,
    done: bool,
}

impl Scripted {
    fn new(x: &Exchange) -> Scripted {
        Scripted {
            pieces: x.pieces.clone().into_iter(),
            next: None,
            end: x.end,
            length: x.content_length,
            sleep: None,
            done: false,
        }
    }

    fn empty() -> Scripted {
        Scripted {
            pieces: Vec::new().into_iter(),
            next: None,
            end: End::Eos,
            length: Some(0),
            sleep: None,
            done: true,
        }
    }
}

impl Body for Scripted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            if let Some(sleep) = this.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                this.sleep = None;
                if let Some(b) = this.next.take() {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                // The stall (or the pause before an abort) is over: drop
                // the connection.
                this.done = true;
                return Poll::Ready(Some(Err("scripted: connection dropped".into())));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match this.pieces.next() {
                Some((delay, b)) if delay.is_zero() => {
                    return Poll::Ready(Some(Ok(Frame::data(b))));
                }
                Some((delay, b)) => {
                    this.next = Some(b);
                    this.sleep = Some(Box::pin(tokio::time::sleep(delay)));
                }
                None => match this.end {
                    End::Eos | End::NoHead => {
                        this.done = true;
                        return Poll::Ready(None);
                    }
                    End::Abort => {
                        // Let hyper flush what was sent, then drop.
                        this.end = End::Stall(Duration::from_millis(10));
                    }
                    End::Stall(d) => {
                        this.sleep = Some(Box::pin(tokio::time::sleep(d)));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.sleep.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.length
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}
