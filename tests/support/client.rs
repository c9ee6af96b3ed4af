//! Client helpers: requests into the proxy, responses read chunk by chunk
//! with client-side timing; a raw HTTP/1.1 client for header-level tests.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// An HTTP/1.1 client with no connection reuse surprises (pool kept small).
pub(crate) fn http1() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http()
}

/// An HTTP/1.1 client that keeps connections open between requests (for
/// load: thousands of requests without thousands of sockets).
pub(crate) fn pooled() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An h2c (HTTP/2 prior knowledge) client.
pub(crate) fn h2c() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// A request to send.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub method: Method,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

impl Req {
    /// `POST {base}{path}` with a JSON body.
    pub(crate) fn post_json(base: SocketAddr, path: &str, body: impl Into<Bytes>) -> Req {
        Req {
            method: Method::POST,
            url: format!("http://{base}{path}"),
            headers: vec![("content-type".into(), "application/json".into())],
            body: body.into(),
        }
    }

    /// `GET {base}{path}` with no body.
    pub(crate) fn get(base: SocketAddr, path: &str) -> Req {
        Req {
            method: Method::GET,
            url: format!("http://{base}{path}"),
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    pub(crate) fn header(mut self, k: &str, v: &str) -> Req {
        self.headers.push((k.to_owned(), v.to_owned()));
        self
    }

    fn build(&self) -> Request<Full<Bytes>> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(&self.url);
        for (k, v) in &self.headers {
            b = b.header(k, v);
        }
        b.body(Full::new(self.body.clone())).expect("build request")
    }
}

/// A response read to its end, with the time each chunk arrived.
#[derive(Debug)]
pub(crate) struct Streamed {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Time from sending the request to the response head.
    pub head_after: Duration,
    /// `(time since the request was sent, chunk)`.
    pub chunks: Vec<(Duration, Bytes)>,
    /// The whole body as received.
    pub body: Vec<u8>,
    /// Set when the body broke off with an error.
    pub error: Option<String>,
}

impl Streamed {
    /// The body as UTF-8 text (lossy).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Time the first chunk containing `needle` arrived.
    pub(crate) fn first_containing(&self, needle: &str) -> Option<Duration> {
        let mut seen = Vec::new();
        for (t, c) in &self.chunks {
            seen.extend_from_slice(c);
            if String::from_utf8_lossy(&seen).contains(needle) {
                return Some(*t);
            }
        }
        None
    }

    /// Body parsed as JSON.
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {:?}", self.text()))
    }
}

/// Send `req`, returning the response head and the time it was sent.
pub(crate) async fn send(client: &HttpClient, req: &Req) -> (http::Response<Incoming>, Instant) {
    let t0 = Instant::now();
    let resp = super::within(
        super::STEP_TIMEOUT,
        "the proxy's response head",
        client.request(req.build()),
    )
    .await
    .unwrap_or_else(|e| panic!("request {} {} failed: {e:?}", req.method, req.url));
    (resp, t0)
}

/// Read the rest of `resp` chunk by chunk (bounded by `limit`).
pub(crate) async fn read_all(
    resp: http::Response<Incoming>,
    t0: Instant,
    limit: Duration,
) -> Streamed {
    let head_after = t0.elapsed();
    let (parts, mut body) = resp.into_parts();
    let mut out = Streamed {
        status: parts.status,
        headers: parts.headers,
        head_after,
        chunks: Vec::new(),
        body: Vec::new(),
        error: None,
    };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => panic!(
                "response body did not finish within {limit:?}; got so far: {:?}",
                out.text()
            ),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                out.error = Some(format!("{e:?}"));
                break;
            }
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    out.body.extend_from_slice(&data);
                    out.chunks.push((t0.elapsed(), data));
                }
            }
        }
    }
    out
}

/// One request per index in `range`, `concurrency` at a time over pooled
/// connections; `make(i)` builds request `i`. Every response must be 200.
pub(crate) async fn load(
    range: std::ops::Range<usize>,
    concurrency: usize,
    make: impl Fn(usize) -> Req + Send + Sync + 'static,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let make = Arc::new(make);
    let next = Arc::new(AtomicUsize::new(range.start));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (make, next, end) = (make.clone(), next.clone(), range.end);
            tokio::spawn(async move {
                let c = pooled();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= end {
                        return;
                    }
                    let got = fetch(&c, &make(i)).await;
                    assert_eq!(got.status, 200, "request {i}: {}", got.text());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("load task");
    }
}

/// Send `req` and read the whole response.
pub(crate) async fn fetch(client: &HttpClient, req: &Req) -> Streamed {
    let (resp, t0) = send(client, req).await;
    read_all(resp, t0, super::STEP_TIMEOUT).await
}

/// Read from `body` until the collected text contains `needle`; returns what was read.
pub(crate) async fn read_until(body: &mut Incoming, needle: &str) -> Vec<u8> {
    let mut got = Vec::new();
    let fut = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.expect("body error before the expected text");
            if let Ok(d) = frame.into_data() {
                got.extend_from_slice(&d);
                if String::from_utf8_lossy(&got).contains(needle) {
                    return;
                }
            }
        }
        panic!(
            "body ended before {needle:?}; got {:?}",
            String::from_utf8_lossy(&got)
        );
    };
    super::within(
        super::STEP_TIMEOUT,
        &format!("{needle:?} in the response body"),
        fut,
    )
    .await;
    got
}

/// A raw HTTP/1.1 exchange: write `request` bytes as they are, read until the
/// server closes (or `limit`), return everything read.
pub(crate) async fn raw_http1(addr: SocketAddr, request: &[u8], limit: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.expect("connect to proxy");
    s.write_all(request).await.expect("write raw request");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(limit, s.read_to_end(&mut out)).await;
    out
}

/// Split a raw HTTP/1.1 response into (status, headers as lowercase-name pairs, rest).
pub(crate) fn parse_raw_response(raw: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| {
            panic!(
                "no complete response head in {:?}",
                String::from_utf8_lossy(raw)
            )
        });
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, raw[end + 4..].to_vec())
}

/// Headers that are end-to-end (everything but hop-by-hop and the ones a
/// proxy legitimately sets), as sorted lowercase pairs, for comparison.
pub(crate) fn end_to_end(headers: &HeaderMap) -> Vec<(String, String)> {
    const HOP: &[&str] = &[
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "date",
    ];
    let mut v: Vec<(String, String)> = headers
        .iter()
        .filter(|(k, _)| !HOP.contains(&k.as_str()))
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    v.sort();
    v
}
