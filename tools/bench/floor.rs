//! `tokentap-bench floor`: the least a reverse proxy on tokentap's stack and
//! shape costs, as a reference point for tokentap's own CPU and memory.
//!
//! Like tokentap it serves on one current-thread tokio runtime per CPU
//! (`server.threads = 0`), with hyper's HTTP/1 server (a header read timer
//! on, as tokentap's has) in front and, per serving thread and upstream, a
//! pool of idle `hyper::client::conn::http1` connections behind. As in
//! tokentap's `upstream/conn.rs`, the response body drives its upstream
//! connection itself and gives it back to the pool once read to its end.
//! Everything else is left out: no metering, telemetry, tenant resolution,
//! head screening, limits, TLS, HTTP/2, upgrades or graceful shutdown.
//! Bodies and heads pass through unchanged (hyper re-frames them).

use std::convert::Infallible;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, clap::Args)]
pub(crate) struct FloorArgs {
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// `http://HOST:PORT`, or `PREFIX=http://HOST:PORT` for requests whose
    /// path starts with PREFIX; repeatable, the first match wins
    #[arg(long = "upstream", required = true)]
    upstreams: Vec<String>,
    /// Serving threads (0 = one per CPU, tokentap's default)
    #[arg(long, default_value_t = 0)]
    threads: usize,
}

/// One upstream connection: the request handle and the state machine.
struct H1 {
    sender: client::SendRequest<Incoming>,
    conn: Option<Box<client::Connection<TokioIo<TcpStream>, Incoming>>>,
}

impl H1 {
    fn drive(&mut self, cx: &mut Context<'_>) {
        if let Some(conn) = self.conn.as_mut()
            && Pin::new(&mut **conn).poll(cx).is_ready()
        {
            self.conn = None;
        }
    }

    fn reusable(&self) -> bool {
        self.conn.is_some() && self.sender.is_ready()
    }
}

/// One upstream as one serving thread sees it: its idle connections.
struct Upstream {
    prefix: String,
    addr: SocketAddr,
    idle: Mutex<Vec<H1>>,
}

impl Upstream {
    /// A live idle connection, or a new one.
    async fn connection(&self) -> Result<H1, String> {
        loop {
            let popped = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
            let Some(mut h1) = popped else { break };
            // One poll: a connection the upstream closed finds out here.
            poll_fn(|cx| {
                h1.drive(cx);
                Poll::Ready(())
            })
            .await;
            if h1.reusable() {
                return Ok(h1);
            }
        }
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|e| e.to_string())?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = client::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        Ok(H1 {
            sender,
            conn: Some(Box::new(conn)),
        })
    }
}

/// Parse `--upstream` values into `(prefix, address)`.
fn parse_upstream(s: &str) -> Result<(String, SocketAddr), String> {
    let (prefix, url) = s.split_once('=').unwrap_or(("", s));
    let hostport = url
        .strip_prefix("http://")
        .ok_or(format!("{url}: not http://HOST:PORT"))?;
    let addr = hostport
        .trim_end_matches('/')
        .parse()
        .map_err(|e| format!("{url}: {e}"))?;
    Ok((prefix.to_owned(), addr))
}

pub(crate) async fn run(args: FloorArgs) -> Result<(), String> {
    let (addr, n) = start(&args)?;
    eprintln!("floor listening on {addr} ({n} serving threads)");
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

/// Bind and start the serving threads; the address and how many threads.
fn start(args: &FloorArgs) -> Result<(SocketAddr, usize), String> {
    let routes = args
        .upstreams
        .iter()
        .map(|s| parse_upstream(s))
        .collect::<Result<Vec<_>, _>>()?;
    let listener = std::net::TcpListener::bind(args.listen).map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let n = match args.threads {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
        n => n,
    };
    for id in 1..=n {
        let listener = listener.try_clone().map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let ups: Arc<[Upstream]> = routes
            .iter()
            .map(|(prefix, addr)| Upstream {
                prefix: prefix.clone(),
                addr: *addr,
                idle: Mutex::new(Vec::new()),
            })
            .collect();
        std::thread::Builder::new()
            .name(format!("floor-serve-{id}"))
            .spawn(move || runtime.block_on(serve(listener, ups)))
            .map_err(|e| e.to_string())?;
    }
    Ok((listener.local_addr().map_err(|e| e.to_string())?, n))
}

/// Accept on this thread's copy of the listener and serve each connection.
async fn serve(listener: std::net::TcpListener, ups: Arc<[Upstream]>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => return eprintln!("floor: {e}"),
    };
    let mut h1 = server::Builder::new();
    h1.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(10));
    let h1 = Arc::new(h1);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of descriptors, most likely: wait for some to close.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (h1, ups) = (h1.clone(), ups.clone());
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let ups = ups.clone();
                async move { Ok::<_, Infallible>(forward(req, &ups).await) }
            });
            let _ = h1.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// Send `req` to its upstream; its response, or a bare 404 or 502.
async fn forward(req: Request<Incoming>, ups: &Arc<[Upstream]>) -> Response<Relay> {
    let Some(i) = ups
        .iter()
        .position(|u| req.uri().path().starts_with(&u.prefix))
    else {
        return status(StatusCode::NOT_FOUND);
    };
    let Ok(mut h1) = ups[i].connection().await else {
        return status(StatusCode::BAD_GATEWAY);
    };
    let mut head = pin!(h1.sender.send_request(req));
    let res = poll_fn(|cx| {
        h1.drive(cx);
        head.as_mut().poll(cx)
    })
    .await;
    match res {
        Ok(res) => res.map(|body| Relay {
            body: Some(body),
            done: false,
            h1: Some((h1, ups.clone(), i)),
        }),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(code: StatusCode) -> Response<Relay> {
    let mut res = Response::new(Relay {
        body: None,
        done: true,
        h1: None,
    });
    *res.status_mut() = code;
    res
}

/// A response body that drives its upstream connection, and gives it back
/// to its pool (upstream `usize` of the list) once read to its end.
struct Relay {
    /// `None`: an empty body.
    body: Option<Incoming>,
    done: bool,
    h1: Option<(H1, Arc<[Upstream]>, usize)>,
}

impl Body for Relay {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        if let Some((h1, ..)) = this.h1.as_mut() {
            h1.drive(cx);
        }
        let Some(body) = this.body.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = Pin::new(body).poll_frame(cx);
        this.done |= matches!(frame, Poll::Ready(None));
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Incoming::size_hint)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if !(self.done || self.is_end_stream()) {
            return;
        }
        if let Some((mut h1, ups, i)) = self.h1.take() {
            // Let it finish the exchange; the next checkout polls it again.
            h1.drive(&mut Context::from_waker(Waker::noop()));
            if h1.reusable() {
                ups[i]
                    .idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(h1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use http_body_util::{BodyExt as _, Full};

    use super::*;

    /// An upstream that answers `PATH BODY` in two chunks (chunked framing),
    /// counting the connections it accepted.
    async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let conns = Arc::new(AtomicUsize::new(0));
        let counted = conns.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::Relaxed);
                let svc = service_fn(|req: Request<Incoming>| async move {
                    let path = req.uri().path().to_owned();
                    let body = req.into_body().collect().await?.to_bytes();
                    let (mut tx, rx) = http_body_util::channel::Channel::<Bytes>::new(2);
                    tokio::spawn(async move {
                        let _ = tx.send_data(Bytes::from(format!("{path} "))).await;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        let _ = tx.send_data(body).await;
                    });
                    Ok::<_, hyper::Error>(Response::new(rx))
                });
                tokio::spawn(server::Builder::new().serve_connection(TokioIo::new(stream), svc));
            }
        });
        (addr, conns)
    }

    #[tokio::test]
    async fn forwards_bodies_unchanged_over_pooled_connections() {
        let (up, conns) = upstream().await;
        let args = FloorArgs {
            listen: "127.0.0.1:0".parse().expect("address"),
            upstreams: vec![format!("/a=http://{up}")],
            threads: 1,
        };
        let (addr, _) = start(&args).expect("floor starts");
        let stream = TcpStream::connect(addr).await.expect("connect");
        let (mut tx, conn) = client::handshake(TokioIo::new(stream))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        let mut got = Vec::new();
        for (path, body) in [("/a/one", "hello"), ("/a/two", "world"), ("/b", "")] {
            let req = Request::post(path)
                .header("host", "floor")
                .body(Full::new(Bytes::from(body)))
                .expect("request");
            let res = tx.send_request(req).await.expect("response");
            let status = res.status();
            let bytes = res.into_body().collect().await.expect("body").to_bytes();
            got.push((status, String::from_utf8_lossy(&bytes).into_owned()));
        }
        assert_eq!(
            got,
            [
                (StatusCode::OK, "/a/one hello".to_owned()),
                (StatusCode::OK, "/a/two world".to_owned()),
                (StatusCode::NOT_FOUND, String::new()),
            ]
        );
        assert_eq!(
            conns.load(Ordering::Relaxed),
            1,
            "the second request reused the connection"
        );
    }
}
