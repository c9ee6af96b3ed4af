//! A stand-in OTLP/HTTP collector: export requests in, `200 OK` with an
//! empty protobuf message out (a valid, empty `Export*ServiceResponse`),
//! request and byte counts kept so the report can show export was on; an
//! optional hook sees every export (the soak counts spans with it).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Response, header};
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// What the sink received.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
}

/// Called with each export's path and body.
pub(crate) type Hook = Arc<dyn Fn(&str, &[u8]) + Send + Sync>;

/// Bind `addr` and serve in the background; returns the bound address.
pub(crate) async fn start(addr: SocketAddr) -> std::io::Result<(SocketAddr, Arc<Counts>)> {
    start_with(addr, Arc::new(|_: &str, _: &[u8]| {})).await
}

/// Like `start`, and hand every export to `hook` before answering it.
pub(crate) async fn start_with(
    addr: SocketAddr,
    hook: Hook,
) -> std::io::Result<(SocketAddr, Arc<Counts>)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let counts = Arc::new(Counts::default());
    let c = counts.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (c, hook) = (c.clone(), hook.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (c, hook) = (c.clone(), hook.clone());
                    async move {
                        let path = req.uri().path().to_owned();
                        let body = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        let n = body.len();
                        hook(&path, &body);
                        c.requests.fetch_add(1, Ordering::Relaxed);
                        c.bytes.fetch_add(n as u64, Ordering::Relaxed);
                        let mut res = Response::new(Full::new(Bytes::new()));
                        res.headers_mut().insert(
                            header::CONTENT_TYPE,
                            header::HeaderValue::from_static("application/x-protobuf"),
                        );
                        Ok::<_, Infallible>(res)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    Ok((local, counts))
}
