//! Upstreams that misbehave on purpose, below the level hyper lets a
//! server script: a raw TCP upstream that reads requests and writes bytes
//! of its choosing, then resets (SO_LINGER 0) or closes; an HTTP/2 server on
//! the `h2` crate that can send RST_STREAM or GOAWAY mid-stream; and a
//! plain HTTP/1 server for any stream (e.g. TLS). Each records what it got.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::Response;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use super::upstream::Reply;

/// One thing a raw upstream does on a connection.
#[derive(Debug, Clone)]
pub(crate) enum Act {
    /// Read one whole HTTP/1.1 request (head and body) and record it.
    ReadRequest,
    /// Write these bytes as they are.
    Write(Bytes),
    /// Wait.
    Sleep(Duration),
    /// Reset the connection: SO_LINGER 0, then close (the peer gets RST).
    Reset,
    /// Close the connection normally (FIN).
    Close,
}

struct RawShared {
    script: Box<dyn Fn(usize) -> Vec<Act> + Send + Sync>,
    connections: AtomicUsize,
    requests: Mutex<Vec<Bytes>>,
    closed: AtomicUsize,
}

/// A raw TCP upstream on 127.0.0.1: each connection runs the acts the
/// script returns for its index (0-based). After the last act the
/// connection is held open until the peer closes it.
pub(crate) struct RawUpstream {
    pub addr: SocketAddr,
    shared: Arc<RawShared>,
    _task: super::Background,
}

impl RawUpstream {
    pub(crate) async fn start(
        script: impl Fn(usize) -> Vec<Act> + Send + Sync + 'static,
    ) -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind raw upstream");
        let addr = listener.local_addr().expect("raw upstream addr");
        let shared = Arc::new(RawShared {
            script: Box::new(script),
            connections: AtomicUsize::new(0),
            requests: Mutex::new(Vec::new()),
            closed: AtomicUsize::new(0),
        });
        let s = shared.clone();
        let task = super::Background::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                while conns.try_join_next().is_some() {}
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let n = s.connections.fetch_add(1, Ordering::SeqCst);
                let acts = (s.script)(n);
                conns.spawn(run_acts(stream, acts, s.clone()));
            }
        });
        RawUpstream {
            addr,
            shared,
            _task: task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// TCP connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Connections this upstream closed or reset itself so far.
    pub(crate) fn closed(&self) -> usize {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Every whole request read so far, as raw bytes.
    pub(crate) fn requests(&self) -> Vec<Bytes> {
        self.shared.requests.lock().unwrap().clone()
    }
}

async fn run_acts(mut stream: TcpStream, acts: Vec<Act>, shared: Arc<RawShared>) {
    let mut buf = BytesMut::new();
    for act in acts {
        match act {
            Act::ReadRequest => match read_request(&mut stream, &mut buf).await {
                Some(req) => shared.requests.lock().unwrap().push(req),
                None => return,
            },
            Act::Write(b) => {
                if stream.write_all(&b).await.is_err() {
                    return;
                }
            }
            Act::Sleep(d) => tokio::time::sleep(d).await,
            Act::Reset => {
                let _ = stream.set_zero_linger();
                drop(stream);
                shared.closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Act::Close => {
                let _ = stream.shutdown().await;
                drop(stream);
                shared.closed.fetch_add(1, Ordering::SeqCst);
                return;
            }
        }
    }
    // Hold the connection until the peer goes away.
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
}

/// Read one HTTP/1.1 request (Content-Length or chunked body); `None` when
/// the peer closed first.
async fn read_request<S: AsyncRead + Unpin>(s: &mut S, buf: &mut BytesMut) -> Option<Bytes> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim() == name)
            .map(|(_, v)| v.trim().to_owned())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let complete = |b: &BytesMut| {
        if chunked {
            b[head_end..].windows(5).any(|w| w == b"0\r\n\r\n")
        } else {
            b.len() >= head_end + len
        }
    };
    while !complete(buf) {
        if s.read_buf(buf).await.ok()? == 0 {
            return None;
        }
    }
    let end = if chunked {
        let at = buf[head_end..]
            .windows(5)
            .position(|w| w == b"0\r\n\r\n")
            .unwrap_or(0);
        head_end + at + 5
    } else {
        head_end + len
    };
    Some(buf.split_to(end).freeze())
}

/// A complete HTTP/1.1 response head, `Transfer-Encoding: chunked`.
pub(crate) fn chunked_head(status: u16, content_type: &str) -> Bytes {
    Bytes::from(format!(
        "HTTP/1.1 {status} OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    ))
}

/// One HTTP/1.1 chunk carrying `data`.
pub(crate) fn chunk(data: &[u8]) -> Bytes {
    let mut v = format!("{:x}\r\n", data.len()).into_bytes();
    v.extend_from_slice(data);
    v.extend_from_slice(b"\r\n");
    v.into()
}

/// Serve HTTP/1.1 on `io`, answering every request with `reply` (its
/// status, headers and the body its `Send` steps add up to) and counting
/// requests in `requests`.
pub(crate) async fn serve_h1<IO>(io: IO, reply: Reply, requests: Arc<AtomicUsize>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let reply = reply.clone();
        let requests = requests.clone();
        async move {
            let _ = req.into_body().collect().await;
            requests.fetch_add(1, Ordering::SeqCst);
            let mut res = Response::new(Full::new(Bytes::from(reply.body_bytes())));
            *res.status_mut() = http::StatusCode::from_u16(reply.status).unwrap();
            for (k, v) in &reply.headers {
                res.headers_mut().append(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                );
            }
            Ok::<_, std::convert::Infallible>(res)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), svc)
        .await;
}

/// One thing a scripted HTTP/2 stream does.
#[derive(Debug, Clone)]
pub(crate) enum H2Act {
    /// Send the response head.
    Head(u16, Vec<(String, String)>),
    /// Send a DATA frame (not ending the stream).
    Data(Bytes),
    /// Wait (lets the connection flush what was queued).
    Sleep(Duration),
    /// RST_STREAM with this reason (before or after the head).
    Reset(h2::Reason),
    /// GOAWAY with this reason on the whole connection, then close it.
    GoAway(h2::Reason),
    /// End the stream (empty DATA with END_STREAM).
    End,
}

/// Serve HTTP/2 on `io` with the `h2` crate: every request stream runs
/// `acts`; `requests` counts the streams opened.
pub(crate) async fn serve_h2<IO>(io: IO, acts: Vec<H2Act>, requests: Arc<AtomicUsize>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    let (goaway_tx, mut goaway_rx) = tokio::sync::mpsc::unbounded_channel::<h2::Reason>();
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            next = conn.accept() => match next {
                Some(Ok((_req, respond))) => {
                    requests.fetch_add(1, Ordering::SeqCst);
                    streams.spawn(run_h2_stream(respond, acts.clone(), goaway_tx.clone()));
                }
                _ => break,
            },
            Some(reason) = goaway_rx.recv() => conn.abrupt_shutdown(reason),
        }
    }
}

async fn run_h2_stream(
    mut respond: h2::server::SendResponse<Bytes>,
    acts: Vec<H2Act>,
    goaway: tokio::sync::mpsc::UnboundedSender<h2::Reason>,
) {
    let mut send: Option<h2::SendStream<Bytes>> = None;
    for act in acts {
        match act {
            H2Act::Head(status, headers) => {
                let mut b = Response::builder().status(status);
                for (k, v) in headers {
                    b = b.header(k, v);
                }
                send = respond.send_response(b.body(()).unwrap(), false).ok();
            }
            H2Act::Data(d) => {
                if let Some(s) = send.as_mut() {
                    let _ = s.send_data(d, false);
                }
            }
            H2Act::Sleep(d) => tokio::time::sleep(d).await,
            H2Act::Reset(reason) => {
                match send.as_mut() {
                    Some(s) => s.send_reset(reason),
                    None => respond.send_reset(reason),
                }
                return;
            }
            H2Act::GoAway(reason) => {
                let _ = goaway.send(reason);
                // Keep the stream handle: dropping it would reset the stream
                // and turn the GOAWAY into an RST_STREAM.
                std::future::pending::<()>().await;
            }
            H2Act::End => {
                if let Some(s) = send.as_mut() {
                    let _ = s.send_data(Bytes::new(), true);
                }
            }
        }
    }
    std::future::pending::<()>().await;
}
